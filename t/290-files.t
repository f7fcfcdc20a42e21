# The Files API through the pool (files.api): a file is pinned to the
# account it was uploaded to and private to the key that uploaded it.
# Another key's retrieve, download or delete gets the 404 an unknown id
# gets, and nothing goes upstream; the list is the key's own.  A Message
# that names a file goes to the file's account every time - a hard
# constraint: it waits for that account rather than fail over to one that
# would answer 404 - and one that names another key's file, or files on two
# accounts, is refused before anything goes upstream.  Two workers, the
# real module, the mock's Files API (which keeps a file in its uploader's
# organisation, as the API does).
use lib 't/lib';
use TB::Nginx;
use TB::Gateway;
use Time::HiRes ();

master_on();
workers(2);
no_shuffle();
mock_start();

our $Beta = 'files-api-2025-04-14';

our $Keys = [
    { key => 'key-one', name => 'one' },
    { key => 'key-two', name => 'two' },
    { key => 'pin-a1', name => 'pin-a1', pool => '[a1]' },
    { key => 'pin-a2', name => 'pin-a2', pool => '[a2]' },
    { key => 'admin-key', name => 'admin', admin => 'true' }];

sub yaml_of {
    my ($extra) = @_;
    main::pool_yaml(accounts => 2, yaml => "files:\n  api: true\n" . ($extra // ''), keys => $Keys);
}

# POST /v1/files with one part named "file": (status, the JSON, the response)
sub upload {
    my ($key, $name, $data, %o) = @_;
    my $b = 'tbTestBoundary42';
    my $body = $o{body} // "--$b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"$name\"\r\n"
        . "Content-Type: " . ($o{mime} // 'text/plain') . "\r\n\r\n$data\r\n--$b--\r\n";
    my $r = http_request(method => 'POST', path => '/v1/files',
                         headers => { 'x-api-key' => $key, 'anthropic-version' => '2023-06-01',
                                      'anthropic-beta' => $Beta,
                                      'content-type' => "multipart/form-data; boundary=$b" },
                         body => $body);
    ($r->{status}, scalar eval { json_decode($r->{body}) }, $r);
}

sub files {
    my ($key, $method, $path) = @_;
    my $r = http_request(method => $method, path => "/v1/files$path",
                         headers => { 'x-api-key' => $key, 'anthropic-version' => '2023-06-01',
                                      'anthropic-beta' => $Beta });
    ($r->{status}, scalar eval { json_decode($r->{body}) }, $r);
}

# a Message whose first user turn carries these files as documents
sub with_files {
    my ($key, @ids) = @_;
    my $body = json_encode({ model => 'claude-sonnet-4-6', max_tokens => 5,
        messages => [{ role => 'user', content => [
            (map { +{ type => 'document', source => { type => 'file', file_id => $_ } } } @ids),
            { type => 'text', text => 'summarise' }] }] });
    my $r = http_request(method => 'POST', path => '/v1/messages',
                         headers => { 'x-api-key' => $key, 'anthropic-version' => '2023-06-01',
                                      'anthropic-beta' => $Beta, 'content-type' => 'application/json' },
                         body => $body);
    ($r->{status}, scalar eval { json_decode($r->{body}) }, $r);
}

sub not_found_ok {
    my ($status, $e, $what) = @_;
    is($status, 404, "$what: 404");
    is($e->{error}{type}, 'not_found_error', "$what: not_found_error");
    like($e->{error}{message} // '', qr/^file not found/, "$what: as an unknown id");
}

gateway_suite(yaml => yaml_of());
run_tests();

__DATA__

=== TEST 1: off unless files.api says so: the gateway's 404 for a path it does not serve, nothing upstream
--- user_files eval
main::pool_yaml(accounts => 1, keys => [{ key => 'key-one', name => 'one' }])
--- check
for my $op (['POST', ''], ['GET', ''], ['GET', '/file_x'], ['GET', '/file_x/content'], ['DELETE', '/file_x']) {
    my ($st, $e) = $op->[0] eq 'POST' ? main::upload('key-one', 'a.txt', 'hello') : main::files('key-one', @$op);
    is($st, 404, "$op->[0] $op->[1]: 404");
    like($e->{error}{message} // '', qr/serves \/v1\/messages, \/v1\/messages\/count_tokens and \/v1\/models, not/,
         "$op->[0] $op->[1]: a path it does not serve");
}
is(scalar @{ mock_log() }, 0, 'nothing went upstream');



=== TEST 2: a file is its key's: another key gets the 404 an unknown id gets; the list is the key's own; delete forgets it
--- check
my ($st, $f, $r) = upload('key-one', 'notes one.txt', "some text\n", mime => 'text/plain');
is($st, 200, 'uploaded');
like($f->{id} // '', qr/^file_/, 'a file id');
my $acct = $r->{headers}{'x-tokenbiryani-account'};
like($acct // '', qr/^a[12]$/, 'to one account');
my @up = grep { ($_->{path} // '') eq '/v1/files' } @{ mock_log() };
is($up[-1]{credential}, "sk-$acct", 'with that account\'s credential');
is($up[-1]{file_sha256}, sha256_hex("some text\n"), 'the bytes as the client sent them');
my $seen = scalar @{ mock_log() };
for my $op (['GET', "/$f->{id}"], ['GET', "/$f->{id}/content"], ['DELETE', "/$f->{id}"]) {
    my ($s, $e) = files('key-two', @$op);
    not_found_ok($s, $e, "another key: $op->[0] $op->[1]");
    my ($s2, $e2) = files('key-two', $op->[0], $op->[1] =~ s/\Q$f->{id}\E/file_nosuchfile/r);
    is($e2->{error}{message} =~ s/file_\w+//r, $e->{error}{message} =~ s/file_\w+//r,
       "$op->[0]: the same words as for an id that never was");
}
is(scalar @{ mock_log() }, $seen, 'none of it went upstream');
my ($s, $l) = files('key-two', 'GET', '');
is_deeply($l->{data}, [], 'another key lists nothing');
($s, $l) = files('key-one', 'GET', '');
is($s, 200, 'listed');
is(scalar @{ $l->{data} }, 1, 'its own file');
is($l->{data}[0]{id}, $f->{id}, 'that one');
is($l->{data}[0]{filename}, 'notes one.txt', 'its name');
is($l->{data}[0]{mime_type}, 'text/plain', 'its type');
is($l->{data}[0]{size_bytes}, 10, 'its size');
is($l->{data}[0]{type}, 'file', 'a file');
is(scalar @{ mock_log() }, $seen, 'lists answered by the gateway');
($s, $l) = files('admin-key', 'GET', '');
is(scalar @{ $l->{data} }, 1, 'an admin key sees it');
my ($s3, $o, $r3) = files('key-one', 'GET', "/$f->{id}");
is($s3, 200, 'its key reads it');
is($r3->{headers}{'x-tokenbiryani-account'}, $acct, 'from its account');
my ($s4, $e4) = files('key-one', 'GET', "/$f->{id}/content");
is($s4, 400, 'not downloadable: the account\'s own answer');
like($e4->{error}{message} // '', qr/not downloadable/, 'saying so');
my ($s5) = files('key-one', 'DELETE', "/$f->{id}");
is($s5, 200, 'deleted');
my ($s6, $e6) = files('key-one', 'GET', "/$f->{id}");
not_found_ok($s6, $e6, 'after the delete');
($s, $l) = files('key-one', 'GET', '');
is_deeply($l->{data}, [], 'and not listed');
# /admin/events: its upload and its delete, by the requests that did them
my (undef, $ev) = admin(GET => '/admin/events?since=0&limit=1000');
my @mine = grep { $_->{type} eq 'file' && $_->{file_id} eq $f->{id} } @{ $ev->{events} };
is_deeply([map { $_->{stage} } @mine], ['created', 'deleted'], 'its events: created, deleted');
is($mine[0]{request_id}, $r->{headers}{'x-tokenbiryani-request-id'}, 'by the upload');
is($mine[0]{account}, $acct, 'on its account');
ok(!exists $mine[0]{request_counts}, 'nothing of a batch\'s');



=== TEST 3: a Message naming a file goes to the file's account every time; another key's file, or files on two accounts, refused before anything goes upstream
--- check
my ($st, $f, $r) = upload('key-one', 'a.txt', 'alpha');
my $acct = $r->{headers}{'x-tokenbiryani-account'};
my $from = scalar @{ mock_log() };
for my $i (1 .. 8) {
    my ($s, undef, $rr) = with_files('key-one', $f->{id});
    is($s, 200, "message $i answered");
    is($rr->{headers}{'x-tokenbiryani-account'}, $acct, "message $i on the file's account");
}
is_deeply([sort keys %{{ map { $_->{credential} => 1 } @{ mock_log($from) } }}], ["sk-$acct"],
          'every one sent with its credential only');
$from = scalar @{ mock_log() };
my ($s, $e) = with_files('key-two', $f->{id});
not_found_ok($s, $e, 'another key naming it');
($s, $e) = with_files('key-one', 'file_neveruploaded');
not_found_ok($s, $e, 'a file never uploaded through the gateway');
my $esc = json_encode({ model => 'claude-sonnet-4-6', max_tokens => 5, messages => [{ role => 'user',
    content => [{ type => 'document', source => { type => 'file', FILEID => $f->{id} } }] }] });
$esc =~ s/"FILEID":"file_/"file\\u005fid":"\\u0066ile_/;
my $rr = http_request(method => 'POST', path => '/v1/messages', body => $esc,
                      headers => { 'x-api-key' => 'key-two', 'anthropic-version' => '2023-06-01',
                                   'content-type' => 'application/json' });
is($rr->{status}, 404, 'named with escapes, by another key: 404 all the same');
is(scalar @{ mock_log() }, $from, 'none of them went upstream');
# files on two accounts: one uploaded by a key held to a1, one to a2
my (undef, $f1) = upload('pin-a1', 'one.txt', 'one');
my (undef, $f2) = upload('pin-a2', 'two.txt', 'two');
($s, $e) = with_files('admin-key', $f1->{id}, $f2->{id});
is($s, 400, 'files on two accounts: 400');
like($e->{error}{message} // '', qr/files \Q$f1->{id}\E and \Q$f2->{id}\E are held by two accounts/, 'saying why');
($s, undef, $rr) = with_files('admin-key', $f2->{id});
is($s, 200, 'an admin key may name any file');
is($rr->{headers}{'x-tokenbiryani-account'}, 'a2', 'on its account');
($s, $e) = with_files('pin-a1', $f2->{id});
not_found_ok($s, $e, 'a key naming a file of another key');
is(scalar(grep { ($_->{path} // '') eq '/v1/messages' } @{ mock_log($from) }), 1, 'only the admin\'s one went upstream');



=== TEST 4: when the file's account is out of capacity, a Message naming it waits for that account; one naming none goes elsewhere
--- check
my ($st, $f, $r) = upload('key-one', 'a.txt', 'alpha');
my $acct = $r->{headers}{'x-tokenbiryani-account'};
my $other = $acct eq 'a1' ? 'a2' : 'a1';
mock_config({ credentials => { "sk-$acct" => { requests_limit => 1, window_seconds => 3 } } });
my ($s, undef, $rr) = with_files('key-one', $f->{id});
is($s, 200, 'the first answered');
my $from = scalar @{ mock_log() };
my $t0 = Time::HiRes::time();
($s, undef, $rr) = with_files('key-one', $f->{id});
my $took = Time::HiRes::time() - $t0;
is($s, 200, 'the second answered');
is($rr->{headers}{'x-tokenbiryani-account'}, $acct, 'on the file\'s account');
ok($took > 0.5, sprintf('after waiting for its window (%.2f s)', $took));
is_deeply([map { $_->{credential} } grep { ($_->{path} // '') eq '/v1/messages' && ($_->{status} // 0) == 200 } @{ mock_log($from) }],
          ["sk-$acct"], 'never sent to the other account');
my $m = message_with('key-one');
is($m->{status}, 200, 'a Message naming no file');
is($m->{headers}{'x-tokenbiryani-account'}, $other, 'goes to the account with room');



=== TEST 5: bad input: a multipart body cut short, an id the API never gives; nothing kept
--- check
my ($st, $e) = upload('key-one', 'a.txt', 'x', body => "--tbTestBoundary42\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.txt\"\r\n\r\nhalf");
is($st, 400, 'cut short: the account\'s 400');
is($e->{type}, 'error', 'Anthropic-shaped');
my (undef, $l) = files('key-one', 'GET', '');
is_deeply($l->{data}, [], 'nothing kept');
($st, $e) = files('key-one', 'GET', '/file_a.b');
is($st, 404, 'an id no file can have: 404');
($st, $e) = files('key-one', 'GET', '/file%20x');
is($st, 400, 'a path with percent-encoding: 400, as for every path');
($st, $e) = with_files('key-one', 'file_x y');
not_found_ok($st, $e, 'a Message naming one');
($st, $e) = files('key-one', 'POST', '/file_abc/content');
is($st, 405, 'a method the path does not take: 405');



=== TEST 6: SQLite: after a restart every file is still on its account, private to its key, and pins its Messages
--- user_files eval
main::yaml_of("store:\n  backend: sqlite\n")
--- check
my ($st, $f, $r) = upload('key-one', 'kept.pdf', '%PDF-1.4 kept', mime => 'application/pdf');
is($st, 200, 'uploaded');
my $acct = $r->{headers}{'x-tokenbiryani-account'};
ok(poll_until(5, sub { @{ sqlite_rows('SELECT id FROM tb_objects WHERE id = ?', [$f->{id}]) } }), 'its record in the file');
like(sqlite_rows('SELECT value FROM tb_objects WHERE id = ?', [$f->{id}])->[0]{value},
     qr/^tba1\.[0-9a-f]{8}\.\d+\.[\w-]{43}\.o1 2 .* 2:$acct 3:one 13 0 8:kept\.pdf 15:application\/pdf\z/,
     'authenticated: its account, key, size, name and type');
restart();
my ($s, $l) = files('key-one', 'GET', '');
is($l->{data}[0]{filename}, 'kept.pdf', 'listed after the restart, with its name');
my ($s2, $e2) = files('key-two', 'GET', "/$f->{id}");
not_found_ok($s2, $e2, 'still private');
for (1 .. 3) {
    my ($s3, undef, $rr) = with_files('key-one', $f->{id});
    is($rr->{headers}{'x-tokenbiryani-account'}, $acct, 'still pinning its Messages');
}



=== TEST 7: over TLS, connections kept alive: an upload, its retrieve and the Messages naming it, on its account
--- http_config eval
"tokenbiryani_ssl_trusted_certificate \$TEST_NGINX_CA;\n" . $TB::Gateway::HttpConfig
--- user_files eval
main::pool_yaml(accounts => [{ id => 'tls', base_url => 'https://localhost:${TEST_NGINX_MOCK_TLS_PORT}' },
                             { id => 'plain', port => 2 }],
                yaml => "server:\n  allow_private_hosts: true\nfiles:\n  api: true\n",
                keys => [{ key => 'pin-tls', name => 'pin-tls', pool => '[tls]' },
                         { key => 'key-one', name => 'one' }])
--- check
my $from = scalar @{ mock_log() };
my $data = join '', map { chr(32 + $_ % 90) } 1 .. 300000;
my ($st, $f, $r) = upload('pin-tls', 'big.txt', $data);
is($st, 200, 'a 300 KB upload over TLS');
is($r->{headers}{'x-tokenbiryani-account'}, 'tls', 'to the TLS account');
my ($up) = grep { ($_->{path} // '') eq '/v1/files' } @{ mock_log($from) };
ok($up->{tls}, 'sent over TLS');
is($up->{file_sha256}, sha256_hex($data), 'every byte as the client sent it');
for (1 .. 3) {
    my ($s, undef, $rr) = with_files('pin-tls', $f->{id});
    is($s, 200, 'a Message naming it');
}
my ($s) = files('pin-tls', 'GET', "/$f->{id}");
is($s, 200, 'retrieved');
my $log = mock_log($from);
ok(!grep({ !$_->{tls} } @$log), 'every request over TLS');
my %conns = map { ($_->{conn} // '') => 1 } @$log;
ok(keys(%conns) < @$log, 'connections kept alive: ' . scalar(keys %conns) . ' for ' . scalar(@$log) . ' requests');
