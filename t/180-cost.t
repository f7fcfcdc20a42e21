# The cost of every request, from its usage, in the inspector: the builtin
# dated table (a dated model id priced by its model's entry), the file's
# entries over it, and an unknown cost - null, never 0 - for a model
# without a price.
use lib 't/lib';
use TB::Nginx;
use TB::Gateway;

master_on();
workers(2);
no_shuffle();
mock_start();

our $Base = <<'_EOY_';
accounts:
  - id: a1
    api_key: sk-a1
    base_url: http://127.0.0.1:${TEST_NGINX_MOCK_PORT}
keys:
  - key: admin-key
    name: ops
    admin: true
_EOY_

# the cost of a usage at rates in USD per MTok, by hand
sub by_hand {
    my ($u, $in, $out, $read, $write) = @_;
    ($u->{input_tokens} * $in + $u->{output_tokens} * $out
     + $u->{cache_read_input_tokens} * $read
     + $u->{cache_creation_input_tokens} * $write) / 1e6;
}

{
    no strict 'refs';
    *{"TB::Nginx::$_"} = \&{$_} for qw(by_hand);
}

gateway_suite(yaml => ">>> tb.yaml\n$Base");
run_tests();

__DATA__

=== TEST 1: pricing: builtin - an uncached and a cached turn priced from their usage, a dated id by its model, the table's date shown
--- user_files eval
">>> tb.yaml\n$::Base" . "pricing: builtin\n"
--- request
GET /healthz
--- check
# turn 1 writes the cache, turn 2 reads it (Sonnet 4.6: 3 / 15 / 0.30 / 3.75 per MTok)
for my $t (1, 2) {
    my $r = TB::Nginx::http_request(method => 'POST', path => '/v1/messages',
        headers => { 'x-api-key' => 'admin-key', 'content-type' => 'application/json',
                     'anthropic-version' => '2023-06-01' },
        body => turn_body(3, $t, model => 'claude-sonnet-4-6-20260101'));
    is($r->{status}, 200, "turn $t served");
    my $rec = request_record($r);
    my $u = $rec->{usage};
    ok($t == 1 ? $u->{cache_creation_input_tokens} > 0 : $u->{cache_read_input_tokens} > 0,
       "turn $t " . ($t == 1 ? 'wrote' : 'read') . ' the cache');
    my $want = by_hand($u, 3, 15, 0.30, 3.75);
    ok(abs($rec->{cost}{usd} - $want) < 1e-9, "turn $t costs \$$rec->{cost}{usd}, by hand \$$want");
    is($rec->{cost}{prices}, 'builtin', 'priced by the builtin table');
    like($rec->{cost}{prices_as_of}, qr/^\d{4}-\d{2}-\d{2}$/, 'which carries its date');
}

# a model without a price: unknown, not free
my $r = message_with('admin-key', model => 'claude-nonesuch-9');
is($r->{status}, 200, 'a model without a price is served');
my $rec = request_record($r);
ok($rec->{usage}{input_tokens} > 0, 'its usage is known');
is($rec->{cost}{usd}, undef, 'its cost is null');
is($rec->{cost}{prices}, undef, 'and priced by nothing');
like($rec->{cost}{why}, qr/no price for this model: spend caps count it as nothing/, 'and why, with what it means for caps');
my (undef, $set) = admin(GET => '/admin/settings');
like($set->{pricing}{builtin_as_of}, qr/^\d{4}-\d{2}-\d{2}$/, '/admin/settings: the table\'s date');
like($set->{pricing}{unpriced}, qr/spend caps cannot count it/, 'and what an unpriced model means');



=== TEST 2: the file's entries win over the builtin table, with the cache rates derived from input when not given
--- user_files eval
">>> tb.yaml\n$::Base" . "pricing:\n  builtin: true\n  claude-sonnet-4-6: {input: 1, output: 2}\n  acme-*: {input: 10, output: 20, cache_read: 1, cache_write: 12}\n"
--- request
GET /healthz
--- check
my $r = message_with('admin-key');
is($r->{status}, 200, 'served');
my $rec = request_record($r);
my $want = by_hand($rec->{usage}, 1, 2, 0.1, 1.25);
ok(abs($rec->{cost}{usd} - $want) < 1e-9, "priced by the file: \$$rec->{cost}{usd}, by hand \$$want");
is($rec->{cost}{prices}, 'file', 'the file\'s prices');
is($rec->{cost}{prices_as_of}, undef, 'which have no date');
$r = message_with('admin-key', model => 'acme-large');
$rec = request_record($r);
ok(abs($rec->{cost}{usd} - by_hand($rec->{usage}, 10, 20, 1, 12)) < 1e-9, 'a wildcard of the file\'s');
$r = message_with('admin-key', model => 'claude-haiku-4-5');
$rec = request_record($r);
ok(abs($rec->{cost}{usd} - by_hand($rec->{usage}, 1, 5, 0.1, 1.25)) < 1e-9, 'the builtin table under it');
is($rec->{cost}{prices}, 'builtin', 'said so');



=== TEST 3: without pricing no cost is known; an entry without its output stops the load naming it
--- request
GET /healthz
--- check
my $r = message_with('admin-key');
is($r->{status}, 200, 'served');
is(request_record($r)->{cost}{usd}, undef, 'no prices: the cost is unknown, not 0');
my ($rc, $out) = nginx_t("accounts:\n  - id: a1\n    api_key: sk-a1\n    base_url: http://127.0.0.1:1\npricing:\n  claude-x: {input: 1}\n");
isnt($rc, 0, 'nginx -t refuses it');
like($out, qr/tb\.yaml:6: pricing\.claude-x: input and output are required/, 'naming the entry and its line');
