# The Message Batches API through the pool: a batch is pinned to the account
# that made it and private to the key that made it.  Another key's
# retrieve, results, cancel and delete get the 404 an unknown id gets, and
# nothing of theirs goes upstream; the list is the key's own; a create is
# checked against the key's scopes for every request in it; the results_url
# a client follows points at the gateway, never at the upstream.
use lib 't/lib';
use TB::Nginx;
use TB::Gateway;

master_on();
workers(2);
no_shuffle();
mock_start();

our $Yaml = pool_yaml(accounts => 2, yaml => "batch:\n  api: true\n", keys => [
    { key => 'key-one', name => 'one' },
    { key => 'key-two', name => 'two' },
    { key => 'key-haiku', name => 'haiku', models => '["claude-haiku-*"]' },
    { key => 'admin-key', name => 'admin', admin => 'true' }]);

sub batch {
    my ($key, $method, $path, $body) = @_;
    my $r = http_request(method => $method, path => "/v1/messages/batches$path",
                         headers => { 'x-api-key' => $key, 'anthropic-version' => '2023-06-01',
                                      'content-type' => 'application/json' },
                         defined $body ? (body => ref $body ? json_encode($body) : $body) : ());
    ($r->{status}, scalar eval { json_decode($r->{body}) }, $r);
}

sub requests_of {
    my ($n, %o) = @_;
    +{ requests => [map { +{ custom_id => "r$_",
                              params => { model => $o{model} // 'claude-sonnet-4-6', max_tokens => 5,
                                          messages => [{ role => 'user', content => "hello $_" }] } } }
                    1 .. $n] };
}

sub not_found_ok {
    my ($status, $e, $what) = @_;
    is($status, 404, "$what: 404");
    is($e->{error}{type}, 'not_found_error', "$what: not_found_error");
    like($e->{error}{message} // '', qr/^message_batch not found/, "$what: as an unknown id");
}

sub key_spend { (grep { $_->{name} eq $_[0] } @{ pool_status()->{keys} })[0]{spend} }

sub until_ended {
    my ($key, $id) = @_;
    my $o;
    poll_until(10, sub { (undef, $o) = batch($key, "GET", "/$id"); ($o->{processing_status} // "") eq "ended" });
    $o;
}

gateway_suite(yaml => $Yaml);
run_tests();

__DATA__

=== TEST 1: off unless batch.api says so: the 404 the gateway gives any path it does not serve, nothing upstream
--- user_files eval
main::pool_yaml(accounts => 1, keys => [{ key => 'key-one', name => 'one' }])
--- check
for my $op (['POST', '', main::requests_of(1)], ['GET', ''], ['GET', '/msgbatch_x'],
            ['GET', '/msgbatch_x/results'], ['POST', '/msgbatch_x/cancel'], ['DELETE', '/msgbatch_x']) {
    my ($st, $e) = main::batch('key-one', @$op);
    is($st, 404, "$op->[0] $op->[1]: 404");
    like($e->{error}{message} // '', qr/serves \/v1\/messages, \/v1\/messages\/count_tokens and \/v1\/models, not/,
         "$op->[0] $op->[1]: a path it does not serve");
}
is(scalar @{ mock_log() }, 0, 'nothing went upstream');



=== TEST 2: a batch is its key's: another key gets the 404 an unknown id gets, and nothing goes upstream
--- check
mock_config({ defaults => { batch_processing_ms => 100 } });
my ($st, $b, $r) = batch('key-one', 'POST', '', requests_of(3));
is($st, 200, 'created');
like($b->{id} // '', qr/^msgbatch_/, 'a batch id');
is($b->{results_url}, undef, 'no results_url while it runs');
my $account = $r->{headers}{'x-tokenbiryani-account'};
like($account // '', qr/^a[12]$/, 'made on one account');
my $seen = scalar @{ mock_log() };
for my $op (['GET', ''], ['GET', '/results'], ['POST', '/cancel'], ['DELETE', '']) {
    my ($s, $e) = batch('key-two', $op->[0], "/$b->{id}$op->[1]");
    not_found_ok($s, $e, "another key: $op->[0] $op->[1]");
    my ($s2, $e2) = batch('key-two', $op->[0], "/msgbatch_nosuchbatch$op->[1]");
    is($e2->{error}{message} =~ s/msgbatch_\w+//r, $e->{error}{message} =~ s/msgbatch_\w+//r,
       "$op->[0] $op->[1]: the same words as for an id that never was");
}
is(scalar @{ mock_log() }, $seen, 'none of it went upstream');
my ($s, $o) = batch('key-one', 'GET', "/$b->{id}");
is($s, 200, 'its own key reads it');
is($o->{id}, $b->{id}, 'the same batch');
($s, $o) = batch('admin-key', 'GET', "/$b->{id}");
is($s, 200, 'an admin key reads it');



=== TEST 3: every operation goes to the account that holds the batch
--- check
mock_config({ defaults => { batch_processing_ms => 50 } });
my %made;
for my $i (1 .. 6) {
    my ($st, $b, $r) = batch($i % 2 ? 'key-one' : 'key-two', 'POST', '', requests_of(1));
    is($st, 200, "batch $i created");
    $made{ $b->{id} } = [$i % 2 ? 'key-one' : 'key-two', $r->{headers}{'x-tokenbiryani-account'}];
}
my %accounts = map { $_->[1] => 1 } values %made;
is(scalar keys %accounts, 2, 'the batches were made on both accounts');
for my $id (sort keys %made) {
    my ($key, $acct) = @{ $made{$id} };
    my $from = scalar @{ mock_log() };
    for (1 .. 3) {
        my ($st, $o, $r) = batch($key, 'GET', "/$id");
        is($st, 200, "$id: read");
        is($r->{headers}{'x-tokenbiryani-account'}, $acct, "$id: from $acct, its account");
    }
    is_deeply(credentials_of(mock_log($from)), [("sk-$acct") x 3], "$id: sent with $acct\'s credential only");
}



=== TEST 4: the list is the key's own; an admin key sees every batch
--- check
my (%mine);
for my $key ('key-one', 'key-one', 'key-two') {
    my ($st, $b) = batch($key, 'POST', '', requests_of(1));
    push @{ $mine{$key} }, $b->{id};
}
my ($st, $l) = batch('key-one', 'GET', '');
is($st, 200, 'listed');
is_deeply([map { $_->{id} } @{ $l->{data} }], [reverse @{ $mine{'key-one'} }], 'one sees its two, newest first');
is($l->{first_id}, $mine{'key-one'}[1], 'first_id');
($st, $l) = batch('key-two', 'GET', '');
is_deeply([map { $_->{id} } @{ $l->{data} }], $mine{'key-two'}, 'two sees its one');
($st, $l) = batch('admin-key', 'GET', '');
is(scalar @{ $l->{data} }, 3, 'the admin sees all three');
($st, $l) = batch('key-one', 'GET', '?limit=1');
is(scalar @{ $l->{data} }, 1, 'limit');
ok($l->{has_more}, 'has_more');
($st, $l) = batch('key-one', 'GET', "?limit=1&after_id=$l->{last_id}");
is_deeply([map { $_->{id} } @{ $l->{data} }], [$mine{'key-one'}[0]], 'after_id pages on');
ok(!$l->{has_more}, 'the last page');
my $e;
($st, $e) = batch('key-one', 'GET', '?limit=0');
is($st, 400, 'limit 0: 400');



=== TEST 5: once it ended, its results_url is the gateway's, and its results come through it
--- check
mock_config({ defaults => { batch_processing_ms => 50 } });
my ($st, $b) = batch('key-one', 'POST', '', requests_of(4));
my $o = until_ended('key-one', $b->{id});
is($o->{processing_status}, 'ended', 'ended');
is($o->{results_url}, "http://localhost/v1/messages/batches/$b->{id}/results",
   'its results_url points at the gateway, by the Host the client used');
my $port = server_port();
for my $host ("127.0.0.1:$port", "[::1]:$port") {
    my $r = http_request(method => 'GET', path => "/v1/messages/batches/$b->{id}",
                         headers => { 'x-api-key' => 'key-one', Host => $host });
    is(json_decode($r->{body})->{results_url}, "http://$host/v1/messages/batches/$b->{id}/results",
       "Host $host: the same");
}
unlike($o->{results_url}, qr/anthropic\.com/, 'never at the upstream');
# the list, the gateway's own answer: every member the API's item has
my (undef, $l) = batch('key-one', 'GET', '');
my ($item) = grep { $_->{id} eq $b->{id} } @{ $l->{data} };
is($item->{results_url}, $o->{results_url}, 'listed: the same results_url');
is_deeply([sort keys %$item], [sort keys %$o], 'listed with the members a retrieve has');
my $t = sub { my ($y, $mo, $d, $h, $mi, $se) = $_[0] =~ /^(\d+)-(\d+)-(\d+)T(\d+):(\d+):(\d+)/; (($d * 24 + $h) * 60 + $mi) * 60 + $se };
ok(abs($t->($item->{created_at}) - $t->($o->{created_at})) <= 1, "its created_at ($item->{created_at}: when the gateway kept it)");
is($t->($item->{expires_at}) - $t->($item->{created_at}), 86400, 'expires_at: a day after it');
my ($s, undef, $r) = batch('key-one', 'GET', "/$b->{id}/results");
is($s, 200, 'results');
my @lines = map { json_decode($_) } grep { length } split /\n/, $r->{body};
is(scalar @lines, 4, 'a line a request');
is_deeply([sort map { $_->{custom_id} } @lines], [qw(r1 r2 r3 r4)], 'every custom_id');
($s) = batch('key-one', 'DELETE', "/$b->{id}");
is($s, 200, 'deleted');
my $e;
($s, $e) = batch('key-one', 'GET', "/$b->{id}");
not_found_ok($s, $e, 'after the delete');



=== TEST 6: a create is checked against the key's scopes, request by request; bad input never goes upstream
--- check
my $seen = scalar @{ mock_log() };
my ($st, $e) = batch('key-haiku', 'POST', '', requests_of(2));
is($st, 403, 'a sonnet request in a haiku key\'s batch: 403');
is($e->{error}{type}, 'permission_error', 'permission_error');
like($e->{error}{message}, qr/may not use model "claude-sonnet-4-6" \(requests\.0\)/, 'naming the request');
my $mixed = requests_of(2, model => 'claude-haiku-4-5');
$mixed->{requests}[1]{params}{model} = 'claude-opus-4-6';
($st, $e) = batch('key-haiku', 'POST', '', $mixed);
is($st, 403, 'one request of two out of scope: 403');
like($e->{error}{message}, qr/\(requests\.1\)/, 'the second named');
for my $bad (['{', qr/not valid JSON/], ['[]', qr/must be a JSON object/], ['{}', qr/requests: Field required/],
             ['{"requests":[]}', qr/at least one/],
             ['{"requests":[{"custom_id":"a b","params":{}}]}', qr/custom_id/],
             ['{"requests":[{"custom_id":"a","params":{"max_tokens":5}}]}', qr/model: Field required/],
             ['{"requests":[{"custom_id":"a","params":{"model":"claude-sonnet-4-6","stream":true}}]}',
              qr/do not stream/],
             ['{"requests":[{"custom_id":"a","params":{"model":"m","model":"claude-sonnet-4-6"}}]}',
              qr/more than once/]) {
    ($st, $e) = batch('key-one', 'POST', '', $bad->[0]);
    is($st, 400, "$bad->[0]: 400");
    like($e->{error}{message} // '', $bad->[1], "$bad->[0]: says why");
}
($st, $e) = batch('key-one', 'GET', '/../../v1/models');
ok($st == 400 || $st == 404, 'a path with dot-segments is refused');
($st, $e) = batch('key-one', 'PUT', '');
is($st, 405, 'PUT: 405');
($st, $e) = batch('key-one', 'GET', '/msgbatch_x/other');
is($st, 404, 'an unknown sub-path: 404');
($st, $e) = batch('key-one', 'GET', '/msgbatch_x', '{"a":1}');
is($st, 400, 'a body on a GET: 400');
is(scalar @{ mock_log() }, $seen, 'nothing went upstream');



=== TEST 7: a batch's estimate is held against its key's cap while it runs; its results charge what it used at half price, once
--- user_files eval
main::pool_yaml(accounts => 1, yaml => "batch:\n  api: true\npricing: builtin\n", keys => [
    { key => 'key-one', name => 'one', spend_cap_usd => '0.01' },
    { key => 'key-tiny', name => 'tiny', spend_cap_usd => '0.0000001' },
    { key => 'admin-key', name => 'admin', admin => 'true' }])
--- check
mock_config({ defaults => { batch_processing_ms => 50 } });
my ($st, $b) = batch('key-one', 'POST', '', requests_of(3));
is($st, 200, 'created');
my $held = key_spend('one')->{in_flight_usd};
ok($held > 0, "its estimate held on the key while it runs (\$$held)");
ok($held >= 3 * 5 * 15000 / 2 / 1e9, 'at least its requests\' max_tokens at half the output price');
until_ended('key-one', $b->{id});
my ($s, undef, $r) = batch('key-one', 'GET', "/$b->{id}/results");
is($s, 200, 'results read');
my $want = 0;
for (grep { length } split /\n/, $r->{body}) {
    my $u = json_decode($_)->{result}{message}{usage};
    $want += $u->{input_tokens} * 3000 + $u->{output_tokens} * 15000;
}
my $sp = key_spend('one');
is($sp->{in_flight_usd}, 0, 'the hold released');
ok(abs($sp->{window_usd} - $want / 2 / 1e9) < 1e-12, "charged what the results used at half price ($sp->{window_usd} vs " . $want / 2 / 1e9 . ')');
($s) = batch('key-one', 'GET', "/$b->{id}/results");
is(key_spend('one')->{window_usd}, $sp->{window_usd}, 'read again: not charged twice');
# a batch whose estimate the cap cannot hold is refused, and nothing goes upstream
my $seen = scalar @{ mock_log() };
my $big = requests_of(2);
$_->{params}{max_tokens} = 1000 for @{ $big->{requests} };
my $e;
($s, $e) = batch('key-tiny', 'POST', '', $big);
is($s, 429, 'over the key\'s cap: 429');
like($e->{error}{message} // '', qr/spend cap/, 'naming the cap');
is(scalar @{ mock_log() }, $seen, 'nothing went upstream');
# deleted before its results are read: what it held is what it is charged
my $before = key_spend('one')->{window_usd};
($st, $b) = batch('key-one', 'POST', '', requests_of(2));
$held = key_spend('one')->{in_flight_usd};
until_ended('key-one', $b->{id});
($s) = batch('key-one', 'DELETE', "/$b->{id}");
is($s, 200, 'deleted unread');
$sp = key_spend('one');
is($sp->{in_flight_usd}, 0, 'nothing held');
ok(abs($sp->{window_usd} - $before - $held) < 1e-12, 'charged what it held');



=== TEST 8: results too large to hold go on as they come, and are charged line by line as they pass, once
--- user_files eval
main::pool_yaml(accounts => 1, yaml => "batch:\n  api: true\npricing: builtin\nretry:\n  hold_response_bytes: 1024\n", keys => [
    { key => 'key-one', name => 'one', spend_cap_usd => '1' },
    { key => 'admin-key', name => 'admin', admin => 'true' }])
--- check
mock_config({ defaults => { batch_processing_ms => 50 } });
my ($st, $b) = batch('key-one', 'POST', '', requests_of(60));
is($st, 200, 'created');
ok(key_spend('one')->{in_flight_usd} > 0, 'its estimate held');
until_ended('key-one', $b->{id});
my ($s, undef, $r) = batch('key-one', 'GET', "/$b->{id}/results");
is($s, 200, 'results');
ok(length($r->{body}) > 10 * 1024, 'larger than the gateway holds (' . length($r->{body}) . ' bytes)');
my @lines = map { json_decode($_) } grep { length } split /\n/, $r->{body};
is(scalar @lines, 60, 'every line came through');
my $want = 0;
$want += $_->{result}{message}{usage}{input_tokens} * 3000 + $_->{result}{message}{usage}{output_tokens} * 15000
    for @lines;
my $sp = key_spend('one');
is($sp->{in_flight_usd}, 0, 'the hold released');
ok(abs($sp->{window_usd} - $want / 2 / 1e9) < 1e-12, "charged what the lines used at half price ($sp->{window_usd})");
my $usage = (grep { $_->{id} eq $b->{id} } @{ TB::Nginx::_mock_call(GET => 'batches')->{batches} })[0]{usage};
is($usage->{output_tokens}, 60 * 5, 'the mock\'s own count agrees on the output');
($s) = batch('key-one', 'GET', "/$b->{id}/results");
is($s, 200, 'read again');
is(key_spend('one')->{window_usd}, $sp->{window_usd}, 'not charged twice');



=== TEST 9: a create answered with an error is retried; one that failed once sent, before an error was read, is not sent again
--- check
my $from = scalar @{ mock_log() };
my $r = http_request(method => 'POST', path => '/v1/messages/batches', body => json_encode(requests_of(1)),
                     headers => { 'x-api-key' => 'key-one', 'content-type' => 'application/json',
                                  'x-mock-script' => '529,ok', 'x-mock-script-id' => "b9-$$-1" });
is($r->{status}, 200, 'a 529 is retried, and the batch made');
my @sent = grep { $_->{path} eq '/v1/messages/batches' } @{ mock_log($from) };
is(scalar @sent, 2, 'sent twice: the 529, then the batch');
$from = scalar @{ mock_log() };
$r = http_request(method => 'POST', path => '/v1/messages/batches', body => json_encode(requests_of(1)),
                  headers => { 'x-api-key' => 'key-one', 'content-type' => 'application/json',
                               'x-mock-script' => 'reset,ok', 'x-mock-script-id' => "b9-$$-2" });
ok($r->{status} >= 500, "a connection reset once sent: the gateway's error ($r->{status})");
@sent = grep { $_->{path} eq '/v1/messages/batches' } @{ mock_log($from) };
is(scalar @sent, 1, 'sent once: never twice');
like(error_log_since_block_start(), qr/batch create sent to account "a[12]" failed before its answer was read: it is not sent again/,
     'the log says why');



=== TEST 10: a batch that ends with nobody reading its results: the gateway reads them itself, in the background, and charges them once at half price
--- user_files eval
main::pool_yaml(accounts => 2, yaml => "batch:\n  api: true\n  poll_interval_seconds: 0.05\npricing: builtin\n", keys => [
    { key => 'key-one', name => 'one', spend_cap_usd => '5' },
    { key => 'admin-key', name => 'admin', admin => 'true' }])
--- check
mock_config({ defaults => { batch_processing_ms => 300 } });
my ($st, $b, $r) = batch('key-one', 'POST', '', requests_of(4));
is($st, 200, 'created');
my $acct = $r->{headers}{'x-tokenbiryani-account'};
my $held = key_spend('one')->{in_flight_usd};
ok($held > 0, "its estimate held (\$$held)");
ok(poll_until(10, sub { key_spend('one')->{in_flight_usd} == 0 }), 'the hold let go with no client reading');
my $sp = key_spend('one');
my ($mine) = grep { $_->{id} eq $b->{id} } @{ TB::Nginx::_mock_call(GET => 'batches')->{batches} };
my $want = ($mine->{usage}{input_tokens} * 3000 + $mine->{usage}{output_tokens} * 15000) / 2 / 1e9;
ok($want > 0 && abs($sp->{window_usd} - $want) < 1e-12,
   "charged what the mock says the batch used, at half price ($sp->{window_usd} vs $want)");
my @reads = grep { ($_->{path} // '') =~ m{/\Q$b->{id}\E/results$} } @{ mock_log() };
is(scalar @reads, 1, 'its results read once');
is($reads[0]{version}, 'HTTP/1.0', 'in HTTP/1.0: the body ends with the connection, no chunks to undo');
is_deeply(credentials_of(\@reads), ["sk-$acct"], 'from its account, with its credential');
my @polls = grep { ($_->{path} // '') eq "/v1/messages/batches/$b->{id}" } @{ mock_log() };
ok(@polls >= 1 && !grep({ $_->{credential} ne "sk-$acct" } @polls), 'polled on its account only');
like(TB::Nginx::log_text(), qr/batch "\Q$b->{id}\E" on account "$acct" ended with its results unread: the gateway read them \(4 lines\) and charged \$/,
     'the log says so');
($st, my $o) = batch('key-one', 'GET', "/$b->{id}");
is($o->{processing_status}, 'ended', 'a client reads it as ended');
my ($s) = batch('key-one', 'GET', "/$b->{id}/results");
is($s, 200, 'and its results afterwards');
is(key_spend('one')->{window_usd}, $sp->{window_usd}, 'not charged again');



=== TEST 11: over TLS, connections kept alive: a batch's every operation on its account, its results chunked to the client and charged once; another left unread, read by the gateway over TLS
--- http_config eval
"tokenbiryani_ssl_trusted_certificate \$TEST_NGINX_CA;\n" . $TB::Gateway::HttpConfig
--- user_files eval
main::pool_yaml(accounts => [{ id => 'tls', base_url => 'https://localhost:${TEST_NGINX_MOCK_TLS_PORT}' }],
                yaml => "server:\n  allow_private_hosts: true\nbatch:\n  api: true\n  poll_interval_seconds: 0.05\npricing: builtin\n",
                keys => [{ key => 'key-one', name => 'one', spend_cap_usd => '5' },
                         { key => 'admin-key', name => 'admin', admin => 'true' }])
--- check
mock_config({ defaults => { batch_processing_ms => 300 } });
my $from = scalar @{ mock_log() };
my ($st, $read) = batch('key-one', 'POST', '', requests_of(3));
is($st, 200, 'one created over TLS');
my $o = until_ended('key-one', $read->{id});
my ($s, undef, $r) = batch('key-one', 'GET', "/$read->{id}/results");
is($s, 200, 'its results read by the client');
is(scalar(grep { length } split /\n/, $r->{body}), 3, 'a line a request');
my $after_client = key_spend('one')->{window_usd};
ok($after_client > 0, 'charged');
my ($st2, $unread) = batch('key-one', 'POST', '', requests_of(2));
is($st2, 200, 'another created');
ok(poll_until(10, sub { key_spend('one')->{in_flight_usd} == 0 }), 'the other\'s hold let go with no client reading');
ok(key_spend('one')->{window_usd} > $after_client, 'the other charged too');
my $log = mock_log($from);
ok(!grep({ !$_->{tls} } @$log), 'every request upstream over TLS');
is_deeply([sort keys %{{ map { ($_->{credential} // '-') => 1 } @$log }}], ['sk-tls'], 'with the account\'s credential only');
# the clients' requests, proxied: on connections kept alive (the gateway's
# own polls are calls of their own, each on a connection it closes)
my @proxied = grep { ($_->{headers}{'user-agent'} // '') !~ m{^tokenbiryani/} } @$log;
my %conns = map { ($_->{conn} // '') => 1 } @proxied;
ok(@proxied >= 4 && keys(%conns) <= 2, 'kept alive: ' . scalar(keys %conns) . ' connection(s) for ' . scalar(@proxied) . ' requests');
my @bg = grep { ($_->{path} // '') eq "/v1/messages/batches/$unread->{id}/results" } @$log;
is(scalar @bg, 1, 'the unread one\'s results read once, by the gateway');
like($bg[0]{headers}{'user-agent'} // '', qr{^tokenbiryani/\S+ batch results$}, 'saying who reads them');
my $total = key_spend('one')->{window_usd};
($s) = batch('key-one', 'GET', "/$read->{id}/results");
is($s, 200, 'the first one\'s results read again');
is(key_spend('one')->{window_usd}, $total, 'not charged again');



=== TEST 12: /admin/batches lists every batch with its key, account, state, counts, hold and charge; a batch's charge is in the inspector and /admin/usage, whether a client or the gateway read its results
--- user_files eval
main::pool_yaml(accounts => 2, yaml => "batch:\n  api: true\n  poll_interval_seconds: 0.05\npricing: builtin\nstore:\n  backend: sqlite\n", keys => [
    { key => 'key-one', name => 'one', spend_cap_usd => '5' },
    { key => 'key-two', name => 'two', spend_cap_usd => '5' },
    { key => 'admin-key', name => 'admin', admin => 'true' }])
--- check
mock_config({ defaults => { batch_processing_ms => 60000 } });
my ($st, $open, $r) = batch('key-one', 'POST', '', requests_of(2));
my $acct = $r->{headers}{'x-tokenbiryani-account'};
my ($s, $j) = admin(GET => '/admin/batches');
is($s, 200, '/admin/batches');
my ($b) = grep { $_->{id} eq $open->{id} } @{ $j->{batches} };
is($b->{key}, 'one', 'its key');
is($b->{account}, $acct, 'its account');
is($b->{processing_status}, 'in_progress', 'its state');
is($b->{request_counts}{processing}, 2, 'its counts');
ok($b->{held_usd} > 0 && $b->{held_usd} == $b->{estimate_usd}, "its estimate held (\$$b->{held_usd})");
ok(!$b->{charged}, 'not charged yet');
($s, $j) = admin(GET => '/admin/batches', undef, key => 'key-one');
is($s, 403, 'a tenant key cannot read it');
($s, $j) = admin(GET => '/admin/batches?key=two');
is_deeply($j->{batches}, [], '?key= filters');
($s, $j) = admin(GET => '/admin/files');
is_deeply($j->{files}, [], '/admin/files: none');

# read by a client: the request's record carries the batch's usage and cost
mock_config({ defaults => { batch_processing_ms => 100 } });
my ($st2, $mine) = batch('key-two', 'POST', '', requests_of(3));
until_ended('key-two', $mine->{id});
my ($s2, undef, $rr) = batch('key-two', 'GET', "/$mine->{id}/results");
is($s2, 200, 'a client reads its results');
my $rec = request_record($rr);
my $charged = key_spend('two')->{window_usd};
ok($charged > 0 && abs($rec->{cost}{usd} - $charged) < 1e-9, "its record: the batch's cost (\$$rec->{cost}{usd})");
is($rec->{model}, 'claude-sonnet-4-6', 'and its model');
ok($rec->{usage}{output_tokens} > 0, 'and its usage');
# read by the gateway: a record of its own
my ($st3, $unread) = batch('key-one', 'POST', '', requests_of(2));
ok(poll_until(10, sub { (grep { $_->{id} eq $unread->{id} && $_->{charged} } @{ (admin(GET => '/admin/batches'))[1]{batches} }) }),
   '/admin/batches: charged, once the gateway read it');
my (undef, $reqs) = admin(GET => '/admin/requests?limit=50');
my ($own) = grep { $_->{request_id} =~ /^tbp_/ } @{ $reqs->{requests} };
ok($own, 'the gateway\'s reading in the inspector');
is($own->{key}, 'one', 'under the batch\'s key');
ok($own->{cost}{usd} > 0, "with its cost (\$$own->{cost}{usd})");
my $usage;
my $want = 0;
$want += $_->{window_usd} - $_->{in_flight_usd} for key_spend('one'), key_spend('two');
ok(poll_until(5, sub { my ($us, $ub) = admin(GET => '/admin/usage?range=1h'); $usage = $ub if $us == 200;
                       $usage && abs($usage->{totals}{cost_usd} - $want) < 1e-9 }),
   "/admin/usage counts both batches' charges (\$$want)") or diag(TB::Nginx::json_encode($usage->{totals}));



=== TEST 13: a batch of 10,000 requests: its results (some 45 MB of JSONL) stream through with each worker's private memory bounded, every line counted and charged exactly once at half price
--- user_files eval
main::pool_yaml(accounts => 1, yaml => "batch:\n  api: true\npricing: builtin\n", keys => [
    { key => 'key-one', name => 'one' },
    { key => 'admin-key', name => 'admin', admin => 'true' }])
--- check
# about 600 words a result: some 4.5 kB a line
mock_config({ defaults => { batch_processing_ms => 200, output_tokens => 600 } });
my $n = 10_000;
my $reqs = requests_of($n);
$_->{params}{max_tokens} = 600 for @{ $reqs->{requests} };
my $body = json_encode($reqs);
my ($st, $bt) = batch('key-one', 'POST', '', $body);
is($st, 200, 'a batch of 10,000 requests created (' . length($body) . ' bytes)') or diag(explain($bt));
is($bt->{request_counts}{processing}, $n, 'the mock has all of them');
my $o = until_ended('key-one', $bt->{id});
is($o->{request_counts}{succeeded}, $n, 'ended, each succeeded');

# each worker's memory: its private memory (RssAnon) sampled between the
# client's reads, and its peak resident set (VmHWM, reset through
# clear_refs where this process may), which may see a peak between two
# samples: the larger growth of the two
my $kb = sub {
    my ($pid, $field) = @_;
    open(my $fh, '<', "/proc/$pid/status") or return 0;
    my ($v) = map { /^\Q$field\E:\s+(\d+)/ ? $1 : () } <$fh>;
    $v // 0;
};
my @pids = TB::Nginx::worker_pids();
is(scalar @pids, 2, 'two workers');
my %anon0 = map { $_ => $kb->($_, 'RssAnon') } @pids;
my %rss0 = map { $_ => $kb->($_, 'VmRSS') } @pids;
my $reset = sub { my $fh; open($fh, '>', "/proc/$_[0]/clear_refs") && print($fh "5") && close($fh) };
my $hwm = !grep { !$reset->($_) } @pids;
my %peak = %anon0;
my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => server_port(), Timeout => 10)
    or die "connect: $!\n";
print $s "GET /v1/messages/batches/$bt->{id}/results HTTP/1.1\r\nHost: localhost\r\nx-api-key: key-one\r\n"
       . "anthropic-version: 2023-06-01\r\nConnection: close\r\n\r\n";
my $sel = IO::Select->new($s);
my $raw = '';
my $deadline = time + 30;
while (time < $deadline && $sel->can_read($deadline - time)) {
    my $got = sysread($s, $raw, 1 << 18, length $raw);
    last unless $got;
    for (@pids) { my $v = $kb->($_, 'RssAnon'); $peak{$_} = $v if $v > $peak{$_} }
}
my %grew = map { $_ => List::Util::max($peak{$_} - $anon0{$_}, $hwm ? $kb->($_, 'VmHWM') - $rss0{$_} : 0) } @pids;
close $s;
my $r = TB::Nginx::parse_response($raw);
is($r->{status}, 200, 'results');
is($r->{error}, undef, 'whole, its chunks intact');
my $size = length $r->{body};
ok($size > 40 * 1024 * 1024, "well over 8 MB ($size bytes)");
my @ids = $r->{body} =~ /^\{"custom_id":"(r\d+)"/mg;
my $lines = () = $r->{body} =~ /\n/g;
is($lines, $n, '10,000 lines');
is(scalar(@ids), $n, 'each a result');
is_deeply([sort { substr($a, 1) <=> substr($b, 1) } @ids], [map { "r$_" } 1 .. $n], 'each custom_id once');
SKIP: {
    # their allocators keep what nginx frees: the workers' memory is theirs
    skip 'under a sanitizer or valgrind, memory is not what nginx holds', 2
        if $ENV{TEST_NGINX_VALGRIND} || $ENV{ASAN_OPTIONS};
    for my $pid (@pids) {
        ok($grew{$pid} * 1024 < $size / 4, "worker $pid: its memory grew by at most $grew{$pid} kB"
           . ($hwm ? ' (its peak)' : '') . ' for ' . int($size / 1024) . ' kB of results streamed (< 1/4)');
    }
}

my ($mine) = grep { $_->{id} eq $bt->{id} } @{ TB::Nginx::_mock_call(GET => 'batches')->{batches} };
my $want = ($mine->{usage}{input_tokens} * 3000 + $mine->{usage}{output_tokens} * 15000) / 2;
is($mine->{usage}{output_tokens}, $n * 600, 'the mock\'s own count: 600 tokens a result');
my $sp = key_spend('one');
is($sp->{in_flight_usd}, 0, 'the hold released');
ok(abs($sp->{window_usd} * 1e9 - $want) < 0.5,
   "charged what the mock says the batch used, at half price, to the nanodollar ($sp->{window_usd} vs " . $want / 1e9 . ')');
my @reads = grep { ($_->{path} // '') eq "/v1/messages/batches/$bt->{id}/results" } @{ mock_log() };
is(scalar @reads, 1, 'read from the account once');



=== TEST 14: a batch of 2,000 requests nobody reads: the gateway reads its results (some 9 MB) itself, once, every line, and charges them to the nanodollar at half price
--- user_files eval
main::pool_yaml(accounts => 1, yaml => "batch:\n  api: true\n  poll_interval_seconds: 0.05\npricing: builtin\n", keys => [
    { key => 'key-one', name => 'one' },
    { key => 'admin-key', name => 'admin', admin => 'true' }])
--- check
mock_config({ defaults => { batch_processing_ms => 200, output_tokens => 600 } });
my $n = 2000;
my $reqs = requests_of($n);
$_->{params}{max_tokens} = 600 for @{ $reqs->{requests} };
my ($st, $bt) = batch('key-one', 'POST', '', $reqs);
is($st, 200, 'a batch of 2,000 requests created');
ok(poll_until(20, sub { key_spend('one')->{in_flight_usd} == 0 }), 'its hold let go with no client reading');
my ($mine) = grep { $_->{id} eq $bt->{id} } @{ TB::Nginx::_mock_call(GET => 'batches')->{batches} };
my $want = ($mine->{usage}{input_tokens} * 3000 + $mine->{usage}{output_tokens} * 15000) / 2;
is($mine->{usage}{output_tokens}, $n * 600, 'the mock\'s own count: 600 tokens a result');
my $sp = key_spend('one');
ok(abs($sp->{window_usd} * 1e9 - $want) < 0.5,
   "charged what the mock says the batch used, at half price, to the nanodollar ($sp->{window_usd} vs " . $want / 1e9 . ')');
my @reads = grep { ($_->{path} // '') eq "/v1/messages/batches/$bt->{id}/results" } @{ mock_log() };
is(scalar @reads, 1, 'its results read once: the first reading had every line');
ok(($reads[0]{resp_len} // 0) > 8 * 1024 * 1024, "some 9 MB of them ($reads[0]{resp_len} bytes)");
like(TB::Nginx::log_text(), qr/batch "\Q$bt->{id}\E" on account "a1" ended with its results unread: the gateway read them \(2000 lines\)/,
     'the log says so, with its 2,000 lines');



=== TEST 15: /admin/events tells each batch's life: made, changed, charged (by the request that read it, or the gateway's own reading), deleted, and forgotten when its account no longer has it
--- user_files eval
main::pool_yaml(accounts => 2, yaml => "batch:\n  api: true\n  poll_interval_seconds: 0.05\npricing: builtin\n", keys => [
    { key => 'key-one', name => 'one', spend_cap_usd => '5' },
    { key => 'key-two', name => 'two', spend_cap_usd => '5' },
    { key => 'admin-key', name => 'admin', admin => 'true' }])
--- check
my (undef, $e0) = admin(GET => '/admin/events?since=0&limit=1');
my $since = $e0->{last};
my $batch_events = sub {
    my (undef, $j) = admin(GET => "/admin/events?since=$since&limit=1000");
    [grep { $_->{type} eq 'batch' } @{ $j->{events} }];
};
my $of = sub { my ($id, $stage) = @_; grep { $_->{batch_id} eq $id && $_->{stage} eq $stage } @{ $batch_events->() } };
# one that runs for a minute, one read by its client, one left unread
mock_config({ defaults => { batch_processing_ms => 60000 } });
my ($st, $long, $rl) = batch('key-one', 'POST', '', requests_of(2));
mock_config({ defaults => { batch_processing_ms => 100 } });
my ($st2, $read, $rr) = batch('key-two', 'POST', '', requests_of(3));
my ($made) = $of->($read->{id}, 'created');
ok($made, 'a batch made: "created"');
is($made->{request_id}, $rr->{headers}{'x-tokenbiryani-request-id'}, 'by the request that made it');
is($made->{account}, $rr->{headers}{'x-tokenbiryani-account'}, 'on its account');
is($made->{processing_status}, 'in_progress', 'its state');
is($made->{request_counts}{processing}, 3, 'its counts');
ok($made->{held_usd} > 0, "what it holds (\$$made->{held_usd})");
ok(!exists $made->{attempt}, 'no attempt: it is not a request\'s');
like($made->{worker}, qr/^\d+$/, 'the worker that saw it');
until_ended('key-two', $read->{id});
ok((grep { $_->{processing_status} eq 'ended' && $_->{request_counts}{succeeded} == 3 } $of->($read->{id}, 'changed')),
   '"changed" once it ended, with its counts');
my ($s, undef, $res) = batch('key-two', 'GET', "/$read->{id}/results");
is($s, 200, 'its results read by its client');
my ($ch) = $of->($read->{id}, 'charged');
is($ch->{request_id}, $res->{headers}{'x-tokenbiryani-request-id'}, '"charged" by the request that read them');
my $two = key_spend('two')->{window_usd};
ok($two > 0 && abs($ch->{charged_usd} - $two) < 1e-9, "what it was charged (\$$ch->{charged_usd})");
is($ch->{held_usd}, 0, 'holding nothing since');
($s) = batch('key-two', 'DELETE', "/$read->{id}");
is($s, 200, 'deleted by its key');
my ($del) = $of->($read->{id}, 'deleted');
ok($del && $del->{request_id} =~ /^tbr_/, '"deleted", by the request that deleted it');
my ($st3, $unread) = batch('key-one', 'POST', '', requests_of(2));
my $own;
ok(poll_until(10, sub { ($own) = $of->($unread->{id}, 'charged'); $own }), 'one nobody reads: "charged" by the gateway');
like($own->{request_id}, qr/^tbp_/, 'its own reading\'s id');
my $rec = request_record($own->{request_id});
is($rec->{request_id}, $own->{request_id}, 'the one the inspector has');
ok(abs($rec->{cost}{usd} - $own->{charged_usd}) < 1e-9, 'at its cost');
# the first, gone from its account (past its keeping): forgotten, charged what it held
my ($m) = $of->($long->{id}, 'created');
TB::Nginx::_mock_call(POST => "batches/$long->{id}/forget", {});
my $gone;
ok(poll_until(10, sub { ($gone) = $of->($long->{id}, 'forgotten'); $gone }), '"forgotten" when its account answers 404');
is($gone->{request_id}, undef, 'by no request: the gateway\'s own poll');
ok(abs($gone->{charged_usd} - $m->{held_usd}) < 1e-9, "charged what it held (\$$gone->{charged_usd})");
like(TB::Nginx::log_text(), qr/batch "\Q$long->{id}\E" is gone from account "\w+": it is forgotten, charged what it held/, 'the log says so');
($s) = batch('key-one', 'GET', "/$long->{id}");
is($s, 404, 'its key gets the 404 an unknown id gets');
is(scalar(grep { $_->{stage} !~ /^(created|changed|charged|deleted|forgotten)$/ } @{ $batch_events->() }), 0, 'no other stage');



=== TEST 16: results with lines that are not results: never charged less than the batch held, whether its client or the gateway reads them, said in one log line
--- user_files eval
main::pool_yaml(accounts => 1, yaml => "batch:\n  api: true\n  poll_interval_seconds: 0.05\npricing: builtin\n", keys => [
    { key => 'key-one', name => 'one', spend_cap_usd => '5' },
    { key => 'key-two', name => 'two', spend_cap_usd => '5' },
    { key => 'admin-key', name => 'admin', admin => 'true' }])
--- check
mock_config({ defaults => { batch_processing_ms => 100 }, batch_results_unreadable => 1 });
# read by its client
my ($st, $b) = batch('key-one', 'POST', '', requests_of(3));
my $held = key_spend('one')->{in_flight_usd};
ok($held > 0, "its estimate held (\$$held)");
until_ended('key-one', $b->{id});
my ($s, undef, $r) = batch('key-one', 'GET', "/$b->{id}/results");
is($s, 200, 'its results read by its client');
my @lines = grep { length } split /\n/, $r->{body};
is(scalar @lines, 3, 'three lines');
ok(!eval { json_decode($lines[0]) }, 'the first not a result');
my $sp = key_spend('one');
is($sp->{in_flight_usd}, 0, 'nothing held since');
ok(abs($sp->{window_usd} - $held) < 1e-12, "charged what it held (\$$sp->{window_usd}): the line not read may have cost it");
like(TB::Nginx::log_text(), qr/1 of 3 lines of batch "\Q$b->{id}\E"'s results could not be read \(longer than the gateway reads, or not a result\): it is charged what it held/,
     'said in the log');
# read by nobody: the gateway's own reading charges the same way
my ($st2, $u) = batch('key-two', 'POST', '', requests_of(2));
my $held2 = key_spend('two')->{in_flight_usd};
ok(poll_until(10, sub { key_spend('two')->{in_flight_usd} == 0 }), 'read by the gateway');
ok(abs(key_spend('two')->{window_usd} - $held2) < 1e-12, 'charged what it held');
like(TB::Nginx::log_text(), qr/1 of 2 lines of batch "\Q$u->{id}\E"'s results could not be read/, 'said in the log');



=== TEST 17: an account whose Batches API says 429 (its own limit of batch operations) is left out of the next creates until its retry-after; the Messages windows are not touched
--- check
mock_config({ credentials => { 'sk-a1' => { batch_requests_limit => 1 } } });
my $from = scalar @{ mock_log() };
for my $i (1 .. 6) {
    my ($st) = batch('key-one', 'POST', '', requests_of(1));
    is($st, 200, "create $i: made");
}
my @on_a1 = grep { ($_->{path} // '') eq '/v1/messages/batches' && $_->{method} eq 'POST' && $_->{credential} eq 'sk-a1' } @{ mock_log($from) };
my @refused = grep { $_->{status} == 429 } @on_a1;
is(scalar @refused, 1, 'a1 refused one create, and was not asked again within its retry-after');
ok(scalar(@on_a1) <= 2, 'a1 asked at most twice: once made, once refused (' . scalar(@on_a1) . ')');
my (undef, $acs) = admin(GET => '/admin/accounts');
my ($a1) = grep { $_->{id} eq 'a1' } @{ $acs->{accounts} };
is($a1->{state}, 'ready', 'a1 ready for Messages: the batch limit is not theirs');
my $m = http_request(method => 'POST', path => '/v1/messages',
                     headers => { 'x-api-key' => 'key-one', 'content-type' => 'application/json' },
                     body => json_encode({ model => 'claude-sonnet-4-6', max_tokens => 5, messages => [{ role => 'user', content => 'hi' }] }));
is($m->{status}, 200, 'a Message served');
