# Is the prompt cache even on: the body scan notes whether a request asked
# for a cache breakpoint and how large its stable prefix is, the inspector
# says so of each request (and flags a cacheable prefix sent without one),
# and GET /admin/cache-advice tells, by key and model, a client that sends
# no breakpoint from a prefix too small to cache from a cache that is
# sent for and lost, from one that works - against the mock's prompt
# cache, which caches what a real one would.
use lib 't/lib';
use TB::Nginx;
use TB::Gateway;

master_on();
workers(2);
no_shuffle();
mock_start();

our $Yaml = pool_yaml(accounts => 2, yaml => "pricing: builtin\ncache:\n  advice_min_requests: 3\n", keys => [
    { key => 'key-cc', name => 'claude-code' },
    { key => 'key-script', name => 'script' },
    { key => 'key-small', name => 'small' },
    { key => 'key-lost', name => 'lost' },
    { key => 'admin-key', name => 'admin', admin => 'true' }]);

# a stable prefix of some 9,000 tokens (36 KB of text)
our $Long = join(' ', map { "Rule $_: answer with care, cite what you use, and say what you do not know." } 1 .. 480);

sub send_as {
    my ($key, %o) = @_;
    my $system = $o{bp} ? [{ type => 'text', text => $o{system}, cache_control => { type => 'ephemeral' } }]
                        : $o{system};
    my $r = TB::Nginx::http_request(method => 'POST', path => '/v1/messages',
        headers => { 'x-api-key' => $key, 'anthropic-version' => '2023-06-01', 'content-type' => 'application/json' },
        body => json_encode({ model => 'claude-sonnet-4-6', max_tokens => 16, system => $system,
                              messages => [{ role => 'user', content => $o{text} // 'hello' }] }));
    die "$key: $r->{status} $r->{body}\n" unless $r->{status} == 200;
    $r;
}

sub advice { my ($s, $j) = admin(GET => '/admin/cache-advice'); die "cache-advice: $s\n" unless $s == 200; $j }
sub group_of { my ($j, $key) = @_; (grep { $_->{key} eq $key } @{ $j->{groups} })[0] }

gateway_suite(yaml => $Yaml);
run_tests();

__DATA__

=== TEST 1: the four verdicts, from real request shapes; the inspector's word on each request
--- check
# Claude Code's shape: a long system prompt marked for the cache, the same
# every turn of one conversation
send_as('key-cc', system => $Long, bp => 1, text => 'the same task') for 1 .. 3;
# a plain SDK script: the same long prompt, never marked
my $r = send_as('key-script', system => $Long, text => 'one');
send_as('key-script', system => $Long, text => "turn $_") for 2 .. 3;
# a short prompt, unmarked
send_as('key-small', system => 'Be brief.', text => "turn $_") for 1 .. 3;
# marked, but a prefix that changes every time: written, never read
send_as('key-lost', system => "$Long (run $_)", bp => 1, text => "turn $_") for 1 .. 3;
# a record lands as its request's pool is let go, after the answer: awaited
my $j;
ok(poll_until(10, sub { $j = advice(); 4 == grep { $_->{requests} == 3 } @{ $j->{groups} } }), 'every request in the inspector')
    or diag(TB::Nginx::json_encode($j));
is($j->{min_requests}, 3, 'the groups wait for advice_min_requests');
my $cc = group_of($j, 'claude-code');
is($cc->{model}, 'claude-sonnet-4-6', 'by key and model');
is($cc->{requests}, 3, 'its requests');
is($cc->{breakpoint_rate}, 1, 'every one asked for a breakpoint');
ok($cc->{mean_prefix_tokens} > 8000 && $cc->{mean_prefix_tokens} < 12000, "its prefix: about 9,000 tokens ($cc->{mean_prefix_tokens})");
ok($cc->{cache_hit_rate} > 0.5, "most of its prompt read from the cache ($cc->{cache_hit_rate})");
is($cc->{verdict}, 'working', 'working');
like($cc->{says}, qr/^caching is engaged and working: \d+% of the prompt tokens read from a cache$/, $cc->{says});
my $sc = group_of($j, 'script');
is($sc->{breakpoint_rate}, 0, 'the script: no breakpoint');
is($sc->{cache_hit_rate}, 0, 'nothing cached');
ok($sc->{uncached_input_tokens} > 24000, "every prompt token paid in full ($sc->{uncached_input_tokens})");
is($sc->{verdict}, 'no breakpoint', 'the client\'s problem');
like($sc->{says}, qr/^no cache_control breakpoint on a stable prefix of about \d{4,5} tokens: caching never engages, and no routing can recover it/, $sc->{says});
my $sm = group_of($j, 'small');
is($sm->{verdict}, 'too small', 'a short prompt: too small to cache');
like($sm->{says}, qr/too small to cache - nothing to fix here$/, $sm->{says});
my $lo = group_of($j, 'lost');
is($lo->{breakpoint_rate}, 1, 'lost: breakpoints sent');
ok($lo->{cache_hit_rate} < 0.2, "lost: hardly any read ($lo->{cache_hit_rate})");
is($lo->{verdict}, 'routing', 'lost: not the client\'s breakpoints');
like($lo->{says}, qr/^breakpoints sent, hit rate \d+%: conversations are moving between accounts/, $lo->{says});
# the inspector, request by request
my $rec = request_record($r);
is($rec->{cache}{breakpoint}, JSON::PP::false, 'the record: no breakpoint');
ok($rec->{cache}{prefix_tokens} > 8000, 'its prefix');
like($rec->{cache}{hint}, qr/^a stable prefix of about \d+ tokens and no cache_control breakpoint: nothing of it is cached$/, 'flagged');
$rec = request_record(send_as('key-cc', system => $Long, bp => 1, text => 'the same task'));
is($rec->{cache}{breakpoint}, JSON::PP::true, 'one that asked: its breakpoint');
is($rec->{cache}{hint}, undef, 'no flag');
$rec = request_record(send_as('key-small', system => 'Be brief.'));
is($rec->{cache}{hint}, undef, 'a small prefix: no flag');



=== TEST 2: a group short of advice_min_requests waits for its verdict; only GET
--- check
send_as('key-script', system => $Long) for 1 .. 2;
my $sc;
ok(poll_until(10, sub { $sc = group_of(advice(), 'script'); $sc && $sc->{requests} == 2 }), 'both in the inspector');
is($sc->{requests}, 2, 'two so far');
is($sc->{verdict}, undef, 'no verdict yet');
is($sc->{says}, '2 of the 3 answers a verdict waits for', $sc->{says});
my ($s) = admin(POST => '/admin/cache-advice', {});
is($s, 405, 'POST: 405');
