# cache.auto_breakpoint: a request that asks for no prompt-cache breakpoint
# on a stable prefix (system and tools) the cache would take gets one
# where that prefix ends - a string system made the one text block that
# carries it - and nothing else of the body changes: the upstream's body
# with the marker taken out is the client's, byte for byte.  Off by
# default; on globally or per key (YAML and the admin API); never on a
# request that marks its own, on a prefix too small to cache, or on
# count_tokens; a Bedrock account gets it too (Bedrock caches the same
# way).  The inspector says so of each request.  Two workers, the real
# module, the mock's prompt cache.
use lib 't/lib';
use TB::Nginx;
use TB::Gateway;

master_on();
workers(2);
no_shuffle();
mock_start();

sub yaml_of {
    my (%o) = @_;
    main::pool_yaml(accounts => $o{accounts} // 1, yaml => "pricing: builtin\n" . ($o{yaml} // ''), keys => [
        { key => 'key-plain', name => 'plain' },
        { key => 'key-auto', name => 'auto', auto_breakpoint => 'true' },
        { key => 'key-off', name => 'off', auto_breakpoint => 'false' },
        { key => 'admin-key', name => 'admin', admin => 'true' }]);
}

# a stable prefix of some 9,000 tokens, never marked
our $Long = join(' ', map { "Rule $_: answer with care, cite what you use, and say what you do not know." } 1 .. 480);

sub body_of_req {
    my (%o) = @_;
    my $system = $o{bp} ? [{ type => 'text', text => $o{system} // $Long, cache_control => { type => 'ephemeral' } }]
                        : $o{system} // $Long;
    json_encode({ model => 'claude-sonnet-4-6', max_tokens => 16, system => $system,
                  messages => [{ role => 'user', content => $o{text} // 'hello' }] });
}

# sends one: (response, what the upstream got, its record)
sub send_one {
    my ($key, %o) = @_;
    my $body = body_of_req(%o);
    my $r = TB::Nginx::http_request(method => 'POST', path => $o{path} // '/v1/messages',
        headers => { 'x-api-key' => $key, 'anthropic-version' => '2023-06-01', 'content-type' => 'application/json' },
        body => $body);
    die "$key: $r->{status} $r->{body}\n" unless $r->{status} == 200;
    my $path = $o{path} // '/v1/messages';
    my $up = (grep { ($_->{path} // '') =~ /^\Q$path\E$|\/invoke$/ } @{ mock_log() })[-1];
    ($r, $up, $body);
}

# the client's body with the gateway's breakpoint: its system string, made
# the one text block that carries it
sub added {
    my ($body) = @_;
    (my $b = $body) =~ s/"system":("(?:[^"\\]|\\.)*")/"system":[{"type":"text","text":$1,"cache_control":{"type":"ephemeral"}}]/
        or die "no system string in $body\n";
    sha256_hex($b);
}

{
    no strict 'refs';
    *{"TB::Nginx::$_"} = \&{$_} for qw(send_one added);
}

gateway_suite(yaml => yaml_of());
run_tests();

__DATA__

=== TEST 1: off by default: a long unmarked prompt goes as the client sent it, and the inspector says nothing of it is cached
--- check
my ($r, $up, $body) = send_one('key-plain', text => 'one');
is($up->{body_sha256}, sha256_hex($body), 'the body byte for byte');
my $rec = request_record($r);
ok(!$rec->{cache}{breakpoint}, 'no breakpoint');
ok(!$rec->{cache}{auto_breakpoint}, 'none added');
like($rec->{cache}{hint} // '', qr/no cache_control breakpoint/, 'the inspector says why nothing is cached');
($r, $up) = send_one('key-plain', text => 'two');
is($up->{usage}{cache_read_input_tokens} // 0, 0, 'the same prefix again: nothing read from the cache');
# a key that says false, with the cache section silent
($r, $up, $body) = send_one('key-off', text => 'three');
is($up->{body_sha256}, sha256_hex($body), 'a key with auto_breakpoint false: untouched');


=== TEST 2: on for a key: the automatic breakpoint is the body's first member and the only change; the next request reads the prefix from the cache
--- check
my ($r, $up, $body) = send_one('key-auto', text => 'one');
is($up->{body_sha256}, added($body), 'the upstream body is the client\'s with its system string made the one text block that carries a breakpoint, nothing else');
isnt($up->{body_sha256}, sha256_hex($body), '(so it did change)');
is($up->{body_len}, length($body) + length('[{"type":"text","text":,"cache_control":{"type":"ephemeral"}}]'), 'its length: what was added, no more');
ok($up->{usage}{cache_creation_input_tokens} > 8000, 'the prefix written to the cache') or diag(TB::Nginx::json_encode($up->{usage}));
my $rec = request_record($r);
ok($rec->{cache}{breakpoint}, 'the record: a breakpoint sent');
ok($rec->{cache}{auto_breakpoint}, '... added by the gateway');
ok(!defined $rec->{cache}{hint}, 'no hint');
($r, $up) = send_one('key-auto', text => 'two');
ok($up->{usage}{cache_read_input_tokens} > 8000, 'the next request reads it') or diag(TB::Nginx::json_encode($up->{usage}));
ok(TB::Nginx::json_decode($r->{body})->{usage}{cache_read_input_tokens} > 8000, 'and the client sees it in its usage');
# what it is never added to
($r, $up, $body) = send_one('key-auto', bp => 1, text => 'three');
is($up->{body_sha256}, sha256_hex($body), 'a request that marks its own breakpoint: untouched');
($r, $up, $body) = send_one('key-auto', system => 'Be brief.', text => 'four');
is($up->{body_sha256}, sha256_hex($body), 'a prefix too small to cache: untouched');
ok(!request_record($r)->{cache}{auto_breakpoint}, '... none added');
($r, $up, $body) = send_one('key-auto', path => '/v1/messages/count_tokens', text => 'five');
is($up->{body_sha256}, sha256_hex($body), 'count_tokens: untouched');
($r, $up, $body) = send_one('key-plain', text => 'six');
is($up->{body_sha256}, sha256_hex($body), 'another key, the cache section silent: untouched');


=== TEST 3: on for the whole gateway (cache.auto_breakpoint), but for a key that says false; a stream too
--- user_files eval
main::yaml_of(yaml => "cache:\n  auto_breakpoint: true\n")
--- check
my ($r, $up, $body) = send_one('key-plain', text => 'one');
is($up->{body_sha256}, added($body), 'a key that does not say: the cache section\'s');
($r, $up, $body) = send_one('key-off', text => 'two');
is($up->{body_sha256}, sha256_hex($body), 'a key that says false: untouched');
my $sb = TB::Nginx::json_decode(main::body_of_req(text => 'three'));
$sb->{stream} = JSON::PP::true;
$body = json_encode($sb);
$r = TB::Nginx::http_request(method => 'POST', path => '/v1/messages',
    headers => { 'x-api-key' => 'key-plain', 'anthropic-version' => '2023-06-01', 'content-type' => 'application/json' },
    body => $body);
is($r->{status}, 200, 'a stream');
like($r->{body}, qr/"cache_read_input_tokens":\s*[1-9]/, 'its message_start reads the cache');
$up = (grep { ($_->{path} // '') eq '/v1/messages' } @{ mock_log() })[-1];
is($up->{body_sha256}, added($body), 'its body: the same edit');


=== TEST 4: the admin API: a minted key's auto_breakpoint (true, false, null: the cache section's), checked like every field
--- check
my ($s, $j) = admin(POST => '/admin/keys', { name => 'minted', auto_breakpoint => JSON::PP::true });
is($s, 201, 'minted with auto_breakpoint true') or diag(TB::Nginx::json_encode($j));
my $secret = $j->{key};
my ($r, $up, $body) = send_one($secret, text => 'one');
is($up->{body_sha256}, added($body), 'its requests get the breakpoint');
($s, $j) = admin(GET => '/admin/keys');
my ($k) = grep { $_->{name} eq 'minted' } @{ $j->{keys} // $j };
ok($k->{auto_breakpoint}, 'GET /admin/keys says so');
($k) = grep { $_->{name} eq 'plain' } @{ $j->{keys} // $j };
ok(exists $k->{auto_breakpoint} && !defined $k->{auto_breakpoint}, 'a key that does not say: null');
($s, $j) = admin(PATCH => '/admin/keys/minted', { auto_breakpoint => undef });
is($s, 200, 'set back to null') or diag(TB::Nginx::json_encode($j));
ok(poll_until(5, sub { my ($r2, $up2, $b2) = send_one($secret, text => 'two'); $up2->{body_sha256} eq sha256_hex($b2) }),
   'null: the cache section\'s (off)');
($s, $j) = admin(PATCH => '/admin/keys/minted', { auto_breakpoint => 'yes' });
is($s, 400, 'a string refused');
like($j->{error}{message}, qr/auto_breakpoint must be true or false \(or null: the cache section's\)/, 'the message names the field');


=== TEST 5: a Bedrock account gets the same breakpoint (Bedrock caches with cache_control as the API does), and reads its cache by it
--- user_files eval
">>> tb.yaml\ncache:\n  auto_breakpoint: true\naccounts:\n  - id: br1\n    type: bedrock\n    base_url: http://127.0.0.1:\${TEST_NGINX_MOCK_PORT2}\n    options:\n      region: us-east-1\n      access_key_id: AKIDTESTBR1\n      secret_access_key: br1-secret\n      model_map:\n        claude-sonnet-4-6: us.anthropic.claude-sonnet-4-6-v1:0\nkeys:\n  - key: key-plain\n    name: plain\n  - key: admin-key\n    name: admin\n    admin: true\n"
--- init
mock_config({ bedrock => { region => 'us-east-1', keys => { AKIDTESTBR1 => { secret => 'br1-secret' } } } });
--- check
my ($r, $up) = send_one('key-plain', text => 'one');
is($up->{status}, 200, 'Bedrock served it') or diag(TB::Nginx::json_encode($up));
ok(request_record($r)->{cache}{auto_breakpoint}, 'the gateway added its breakpoint');
($r, $up) = send_one('key-plain', text => 'two');
ok(($up->{usage}{cache_read_input_tokens} // 0) > 8000, 'the next request read the prefix from Bedrock\'s cache') or diag(TB::Nginx::json_encode($up));
