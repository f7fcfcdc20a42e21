# Windowed spend caps: a key's, a conversation's (dollars and turns) and an
# account's, each refusing at the right request - the one after the
# request that reached it -, holding under 50 concurrent requests (what is
# in flight is reserved against the cap), and freeing room when the
# window rolls.
use lib 't/lib';
use TB::Nginx;
use TB::Gateway;

master_on();
workers(2);
no_shuffle();
mock_start();

our $Base = <<'_EOY_';
pricing: builtin
accounts:
  - id: a1
    api_key: sk-a1
    base_url: http://127.0.0.1:${TEST_NGINX_MOCK_PORT}
keys:
  - key: admin-key
    name: ops
    admin: true
_EOY_

sub err_of { my $b = eval { TB::Nginx::json_decode($_[0]{body}) }; $b ? $b->{error} : {} }

{
    no strict 'refs';
    *{"TB::Nginx::$_"} = \&{$_} for qw(err_of);
}

gateway_suite(yaml => ">>> tb.yaml\n$Base");
run_tests();

__DATA__

=== TEST 1: a key's cap refuses the request after the one that reached it, says which cap, how much is spent and when, and is not retried; other keys go on
--- user_files eval
">>> tb.yaml\n$::Base" . "  - key: tenant-key\n    name: tenant\n    spend_cap_usd: 0.0005\n  - key: other-key\n    name: other\n    spend_cap_usd: 0.0005\n"
--- request
GET /healthz
--- check
my ($spent, $n, $refused) = (0, 0, undef);
for my $i (1 .. 40) {
    my $r = message_with('tenant-key');
    if ($r->{status} != 200) { $refused = $r; last }
    $n++;
    $spent += request_record($r)->{cost}{usd};
    # the request that reaches the cap is served; the next is not
    last if $spent >= 0.0005 && ($refused = message_with('tenant-key'));
}
ok($n >= 2, "$n requests served under the cap (\$$spent)");
ok($spent >= 0.0005, "the refusal came once the cap was reached (\$$spent of \$0.0005)");
ok($spent - 0.0005 < 0.0005, 'and not later than the request after the one that reached it');
is($refused->{status}, 429, 'refused: 429');
my $e = err_of($refused);
is($e->{type}, 'rate_limit_error', 'a rate_limit_error');
like($e->{message}, qr/key "tenant" has spent \$0\.\d+ of its \$0\.0005 spend cap \(spend_cap_usd\) in the last 24h; /, 'naming the key, the cap and the window');
like($e->{message}, qr/room again in 2[45]h \d+m|room again in 1d 0h/, 'and when the window frees room');
is($refused->{headers}{'x-should-retry'}, 'false', 'a cap that frees in hours: not to be retried');
ok(!defined $refused->{headers}{'retry-after'}, 'and no retry-after');
unlike($refused->{body}, qr/sk-a1|\ba1\b/, "no account in it (the request id's hex may hold the letters)");
is(message_with('other-key')->{status}, 200, 'another key with its own cap is served');
is(message_with('admin-key')->{status}, 200, 'a key without a cap too');
is(message_with('tenant-key')->{status}, 429, 'the capped key stays refused');
my ($ust, $ub) = admin(GET => '/admin/usage');
is($ust, 503, 'without a store, /admin/usage: 503');
like($ub->{error}{message}, qr/usage history is kept in the store.*store\.backend: sqlite/, 'saying where it is kept');



=== TEST 2: a conversation's turn limit and its dollar limit, inside one key; other conversations of the key go on
--- user_files eval
">>> tb.yaml\n$::Base" . "  - key: tenant-key\n    name: tenant\n    session_max_turns: 3\n  - key: cheap-key\n    name: cheap\n    session_cap_usd: 0.0003\n"
--- request
GET /healthz
--- check
my $conv = sub {
    my ($key, $s) = @_;
    my $a = message_args($key);
    $a->{headers}{'x-tokenbiryani-session'} = $s;
    TB::Nginx::http_request(%$a);
};
is($conv->('tenant-key', 'c1')->{status}, 200, "turn $_") for 1 .. 3;
my $r = $conv->('tenant-key', 'c1');
is($r->{status}, 429, 'the fourth turn of the conversation is refused');
like(err_of($r)->{message}, qr/this conversation has run 3 turns in the last 24h, at the 3-turn limit \(session_max_turns\) of key "tenant"; start a new conversation/, 'saying so');
is($r->{headers}{'x-should-retry'}, 'false', 'not to be retried');
is($conv->('tenant-key', 'c2')->{status}, 200, 'another conversation of the key is served');
is($conv->('admin-key', 'c1')->{status}, 200, 'the same session id under another key is another conversation');

my ($spent, $refused) = (0, undef);
for my $i (1 .. 40) {
    my $x = $conv->('cheap-key', 'd1');
    if ($x->{status} != 200) { $refused = $x; last }
    $spent += request_record($x)->{cost}{usd};
}
ok($refused && $spent >= 0.0003, "the conversation refused once it spent \$$spent of \$0.0003");
like(err_of($refused)->{message}, qr/a conversation of key "cheap" has spent \$0\.\d+ of its \$0\.0003 limit \(session_cap_usd\)/, 'naming its limit');
is($conv->('cheap-key', 'd2')->{status}, 200, 'a new conversation of that key is served');



=== TEST 3: 50 concurrent requests of a key with little left overshoot its cap by less than one request's cost
--- user_files eval
">>> tb.yaml\n$::Base" . "  - key: tenant-key\n    name: tenant\n    spend_cap_usd: 0.003\n"
--- request
GET /healthz
--- check
TB::Nginx::mock_config({ event_delay_ms => 20 });
my @reqs = map { message_args('tenant-key', stream => 1, max_tokens => 64) } 1 .. 50;
my $rs = TB::Nginx::http_requests_concurrent(\@reqs);
my @ok = grep { $_->{status} == 200 } @$rs;
my @no = grep { $_->{status} == 429 } @$rs;
is(@ok + @no, 50, 'every request served or refused')
    or diag(join ' ', map { "$_->{status}:" . substr($_->{body}, 0, 200) } grep { $_->{status} != 200 && $_->{status} != 429 } @$rs);
ok(@no > 0, scalar(@no) . ' refused');
my ($spent, $max) = (0, 0);
for my $r (@ok) {
    my $c = request_record($r)->{cost}{usd};
    $spent += $c;
    $max = $c if $c > $max;
}
ok($spent < 0.003 + $max, sprintf('%d served spent $%.6f: over the $0.003 cap by less than one request ($%.6f)', scalar(@ok), $spent, $max));
ok(grep({ err_of($_)->{message} =~ /spend cap/ } @no) == @no, 'each refusal names the cap');
# those that waited for requests in flight to settle too: one answer, not two
my @both = grep { defined $_->{headers}{'retry-after'} } @no;
is(scalar(grep { ($_->{headers}{'x-should-retry'} // '') eq 'false' } @no), scalar(@no),
   'each refusal says not to retry it');
is(scalar(@both), 0, 'and none carries a retry-after with it')
    or diag(join "\n", map { "retry-after: $_->{headers}{'retry-after'}, " . err_of($_)->{message} } @both);
TB::Nginx::mock_config({ event_delay_ms => 0 });



=== TEST 4: the window rolls: a cap that frees within a minute says when, with retry-after, and serves again then
--- user_files eval
">>> tb.yaml\n$::Base" . "  - key: tenant-key\n    name: tenant\n    spend_cap_usd: 0.00001\nspend:\n  window_hours: 0.0008\n"
--- request
GET /healthz
--- check
is(message_with('tenant-key')->{status}, 200, 'the first request reaches the cap');
my $r = message_with('tenant-key');
is($r->{status}, 429, 'the next is refused');
like(err_of($r)->{message}, qr/in the last 3s; room again in \ds/, 'saying when, in seconds');
ok($r->{headers}{'retry-after'} >= 1 && $r->{headers}{'retry-after'} <= 4, "retry-after: $r->{headers}{'retry-after'}");
ok(!defined $r->{headers}{'x-should-retry'} || $r->{headers}{'x-should-retry'} ne 'false', 'worth a retry');
ok(TB::Nginx::poll_until(10, sub { message_with('tenant-key')->{status} == 200 }), 'served again once the window rolled');



=== TEST 5: an account over its cap is filtered with a verdict that says how much and when; the pool's other account serves
--- user_files eval
my $y = $::Base;
$y =~ s/(base_url: \S+\n)/$1    spend_cap_usd: 0.00001\n  - id: a2\n    api_key: sk-a2\n    base_url: http:\/\/127.0.0.1:\${TEST_NGINX_MOCK_PORT}\n    priority: -1\n/;
">>> tb.yaml\n$y"
--- request
GET /healthz
--- check
my $r = message_with('admin-key');
is($r->{headers}{'x-tokenbiryani-account'}, 'a1', 'a1 serves first');
$r = message_with('admin-key');
is($r->{status}, 200, 'served');
is($r->{headers}{'x-tokenbiryani-account'}, 'a2', 'then a2: a1 reached its cap');
my $rec = request_record($r);
my ($c) = grep { ($_->{account} // '') eq 'a1' } @{ $rec->{decision}{candidates} };
diag(TB::Nginx::json_encode($rec)) unless $c;
like($c->{verdict}, qr/^filtered \x{2014} spend cap reached \(\$0\.\d+ of \$0\.00001\), room again in (2[45]h \d+m|1d 0h)$/, "a1: $c->{verdict}");



=== TEST 6: the ledgers survive a reload and a restart: a capped key stays refused, a conversation keeps its turns, a key with room keeps what it spent
--- user_files eval
">>> tb.yaml\nstore:\n  backend: sqlite\n$::Base" . "  - key: tenant-key\n    name: tenant\n    spend_cap_usd: 0.0003\n  - key: turns-key\n    name: turns\n    session_max_turns: 3\n"
--- request
GET /healthz
--- check
my $conv = sub {
    my $a = message_args('turns-key');
    $a->{headers}{'x-tokenbiryani-session'} = 'c1';
    TB::Nginx::http_request(%$a);
};
my $n = 0;
$n++ while $n < 40 && message_with('tenant-key')->{status} == 200;
ok($n >= 1 && $n < 40, "the capped key refused after $n requests");
is($conv->()->{status}, 200, "turn $_") for 1 .. 2;

ok(TB::Nginx::nginx_reload(), 'reloaded');
is(message_with('tenant-key')->{status}, 429, 'after a reload: still refused');
is($conv->()->{status}, 200, 'the third turn');
is($conv->()->{status}, 429, 'and no fourth');

# what the store holds once the writer has written the last charge
ok(TB::Nginx::poll_until(5, sub {
    my $rows = sqlite_rows("SELECT count(*) AS n FROM tb_sessions WHERE key = 'turns'");
    $rows->[0]{n} >= 1;
}), 'the conversation is in the store');
ok(TB::Nginx::poll_until(5, sub {
    sqlite_rows("SELECT count(*) AS n FROM tb_ledgers WHERE scope = 2")->[0]{n} >= 2;
}), 'and the keys\' ledgers');
TB::Nginx::wait_idle();
restart();
like(TB::Nginx::slurp(TB::Nginx::servroot() . '/logs/error.log'), qr/the store's spend read back: [1-9]\d* ledgers, [1-9]\d* conversations/, 'read back at start');
my $r = message_with('tenant-key');
is($r->{status}, 429, 'after a restart: the capped key is still refused');
like(err_of($r)->{message}, qr/spend cap/, 'by its cap');
is($conv->()->{status}, 429, 'the conversation still has no fourth turn');
is(message_with('admin-key')->{status}, 200, 'a key without a cap is served');



=== TEST 7: /admin/usage shows the requests made and what they cost, by account, model and key, and /admin/sessions ranks the conversations and flags the runaways; both after a restart too
--- user_files eval
">>> tb.yaml\nstore:\n  backend: sqlite\nsessions:\n  runaway_turns: 3\n$::Base" . "  - key: tenant-key\n    name: tenant\n"
--- request
GET /healthz
--- check
my $conv = sub {
    my ($key, $s, %o) = @_;
    my $a = message_args($key, %o);
    $a->{headers}{'x-tokenbiryani-session'} = $s;
    TB::Nginx::http_request(%$a);
};
my ($cost, $n) = (0, 0);
for my $i (1 .. 4) {
    my $r = $conv->('tenant-key', 'long');
    $cost += request_record($r)->{cost}{usd}; $n++;
}
my $r = $conv->('admin-key', 'short', model => 'claude-haiku-4-5');
my $hcost = request_record($r)->{cost}{usd};
$cost += $hcost; $n++;

my $usage;
ok(TB::Nginx::poll_until(5, sub {
    my ($st, $b) = admin(GET => '/admin/usage?range=1h&by=key');
    $usage = $b if $st == 200;
    $usage && $usage->{totals}{requests} == $n;
}), "/admin/usage?range=1h counts the $n requests") or diag(TB::Nginx::json_encode($usage));
ok(abs($usage->{totals}{cost_usd} - $cost) < 1e-9, "and their cost: \$$usage->{totals}{cost_usd} (the records: \$$cost)");
is($usage->{step_seconds}, 60, 'in minutes');
my %g = map { $_->{name} => $_ } @{ $usage->{groups} };
is($g{tenant}{totals}{requests}, 4, 'by key: tenant 4');
is($g{ops}{totals}{requests}, 1, 'ops 1');
ok($usage->{totals}{input_tokens} > 0 && $usage->{totals}{output_tokens} > 0, 'tokens counted');
ok(@{ $g{tenant}{series} } >= 1 && $g{tenant}{series}[0]{t} % 60 == 0, 'a series of minutes');
my ($st, $b) = admin(GET => '/admin/usage?range=24h&by=model');
my %m = map { $_->{name} => $_ } @{ $b->{groups} };
ok(abs($m{'claude-haiku-4-5'}{totals}{cost_usd} - $hcost) < 1e-9, 'by model: the haiku turn');
($st, $b) = admin(GET => '/admin/usage?range=2h');
is($st, 400, 'an unknown range: 400');
like($b->{error}{message}, qr/1h, 24h, 7d or 30d/, 'naming the ranges');
($st, $b) = admin(GET => '/admin/usage', undef, key => 'tenant-key');
is($st, 403, 'a tenant key cannot read it');

($st, $b) = admin(GET => '/admin/sessions');
is($st, 200, '/admin/sessions');
my ($long, $short) = @{ $b->{sessions} }[0, 1];
is($long->{key}, 'tenant', 'the costlier conversation first');
is($long->{turns}, 4, 'four turns');
is($long->{account}, 'a1', 'on a1');
ok($long->{runaway}, 'flagged: over runaway_turns');
like($long->{why}, qr/^4 turns, \$0\.\d+ in \d+s$/, "why: $long->{why}");
is($short->{key}, 'ops', 'then the other');
ok(!$short->{runaway}, 'not a runaway');

TB::Nginx::wait_idle();
restart();
($st, $b) = admin(GET => '/admin/sessions');
is($b->{sessions}[0]{turns}, 4, 'after a restart: the conversation and its turns');
is($b->{sessions}[0]{why}, $long->{why}, 'and its flag');
($st, $b) = admin(GET => '/admin/usage?range=1h');
is($b->{totals}{requests}, $n, 'and the usage history');
ok(abs($b->{totals}{cost_usd} - $cost) < 1e-9, 'and its cost');



=== TEST 8: the $tokenbiryani_* variables carry a request's facts into log_format, "-" where nothing is known
--- http_config eval
$TB::Gateway::HttpConfig . q{
    log_format tb 'id=$tokenbiryani_request_id account=$tokenbiryani_account key=$tokenbiryani_key '
                  'session=$tokenbiryani_session attempts=$tokenbiryani_attempts in=$tokenbiryani_input_tokens '
                  'out=$tokenbiryani_output_tokens cr=$tokenbiryani_cache_read_tokens cw=$tokenbiryani_cache_write_tokens '
                  'cost=$tokenbiryani_cost queued=$tokenbiryani_queued_ms ttft=$tokenbiryani_ttft_ms status=$status';
    access_log logs/tb.log tb;
}
--- request
GET /healthz
--- check
my $r = message_with('admin-key', stream => 1);
is($r->{status}, 200, 'a stream served');
my $rec = request_record($r);
my $unpriced = message_with('admin-key', model => 'claude-nonesuch-9');
my $ra = message_args('admin-key');
$ra->{body} = '{"model": "claude-sonnet-4-6", "messages": [';
my $refused = TB::Nginx::http_request(%$ra);
TB::Nginx::wait_idle();
my $log = TB::Nginx::slurp(TB::Nginx::servroot() . '/logs/tb.log');
my ($line) = grep { /id=$rec->{request_id} / } split /\n/, $log;
ok($line, 'the request logged') or diag($log);
my %f = map { split /=/, $_, 2 } split / /, $line // '';
is($f{account}, 'a1', 'account');
is($f{key}, 'ops', 'key');
like($f{session}, qr/^[0-9a-f]{16}$/, 'session');
is($f{attempts}, 1, 'attempts');
is($f{in}, $rec->{usage}{input_tokens}, 'input tokens');
is($f{out}, $rec->{usage}{output_tokens}, 'output tokens');
is($f{cr}, 0, 'cache reads');
is($f{cw}, 0, 'cache writes');
ok(abs($f{cost} - $rec->{cost}{usd}) < 1e-6, "cost $f{cost}");
is($f{queued}, 0, 'queued');
ok($f{ttft} =~ /^\d+$/, "ttft $f{ttft}");
($line) = grep { /id=\Q$unpriced->{headers}{'x-tokenbiryani-request-id'}\E / } split /\n/, $log;
like($line, qr/ cost=- /, 'a model with no price: cost "-", not 0');
($line) = grep { /id=\Q$refused->{headers}{'x-tokenbiryani-request-id'}\E / } split /\n/, $log;
like($line, qr/account=- .* attempts=0 in=- out=- .* cost=- .*status=400/, 'a request the gateway refused: what is not known is "-"');
like($log, qr/id=- account=- key=- .*status=200/, 'a request that is not the gateway\'s: all "-"');



=== TEST 9: a ledger or conversation of another layout in the store is skipped with one warning, and the rest is read back
--- user_files eval
">>> tb.yaml\nstore:\n  backend: sqlite\n$::Base" . "  - key: tenant-key\n    name: tenant\n    spend_cap_usd: 0.0003\n"
--- request
GET /healthz
--- check
my $n = 0;
$n++ while $n < 40 && message_with('tenant-key')->{status} == 200;
ok(TB::Nginx::poll_until(5, sub {
    sqlite_rows("SELECT count(*) AS n FROM tb_ledgers WHERE scope = 2")->[0]{n} >= 1;
}), 'the key\'s ledger is in the store');
TB::Nginx::stop_nginx();
sqlite_py(q{db.execute("INSERT INTO tb_ledgers (scope, id, data) VALUES (2, '0123456789abcdef', x'00ff')")});
start_again();
like(TB::Nginx::slurp(TB::Nginx::servroot() . '/logs/error.log'),
     qr/\[warn\].*1 spend ledgers and conversations in the store were written by another build/, 'the odd one said');
is(message_with('tenant-key')->{status}, 429, 'the good ledger read back: the key is still refused');



=== TEST 10: requests faster than the inspector's ring turns over: the usage history in SQLite counts every one
--- user_files eval
">>> tb.yaml\nstore:\n  backend: sqlite\nobservability:\n  event_buffer: 4\n$::Base" . "  - key: tenant-key\n    name: tenant\n"
--- request
GET /healthz
--- check
my @st = map { $_->{status} // 0 }
         @{ TB::Nginx::http_requests_concurrent([map { message_args('tenant-key') } 1 .. 60]) };
is_deeply(\@st, [(200) x 60], '60 requests at once, the ring holds 4');
my $usage;
ok(TB::Nginx::poll_until(5, sub {
    my ($st, $b) = admin(GET => '/admin/usage?range=1h');
    $usage = $b if $st == 200;
    $usage && $usage->{totals}{requests} == 60;
}), '/admin/usage counts all 60') or diag(TB::Nginx::json_encode($usage));
# two more one at a time: the ring keeps up, so each one's record is
# written, after a sample of the 60; what is read back is listed as the
# ring would
my @last = map { message_with('tenant-key') } 1 .. 2;
is_deeply([map { $_->{status} } @last], [200, 200], 'two more, one at a time');
restart();
my $nback = read_back_listed(\@last);
my $one = message_with('tenant-key');
is($one->{status}, 200, 'one more after a restart');
listed_before_read_back($one, $nback);



=== TEST 11: a store locked for longer than the usage ring lasts: the log says how many requests' usage was lost, and the history counts every other one
--- timeout: 120
--- mock
{"defaults": {"requests_limit": 1000000}}
--- user_files eval
">>> tb.yaml\nstore:\n  backend: sqlite\nobservability:\n  event_buffer: 4\n$::Base" . "  - key: tenant-key\n    name: tenant\n"
--- request
GET /healthz
--- check
my ($pid, $from, $to) = store_locker();
is(scalar <$from>, "locked\n", 'another process holds the write lock');
TB::Nginx::log_mark();
# more than the usage ring keeps (4 times event_buffer, 4,096 at the least),
# 16 at a time (the account's max_concurrency)
my ($n, $ok) = (4400, 0);
for (1 .. $n / 16) {
    $ok += grep { ($_->{status} // 0) == 200 }
           @{ TB::Nginx::http_requests_concurrent([map { message_args('tenant-key') } 1 .. 16]) };
}
is($ok, $n, "$n requests served while the store is locked");
close $to;
waitpid($pid, 0);
my $lost;
ok(TB::Nginx::poll_until(30, sub {
    ($lost) = TB::Nginx::log_text() =~ /(\d+) requests ended before the history was written/;
    defined $lost;
}), 'once the store is written again, the log says usage was lost, and how much');
ok($lost > 0 && $lost <= $n - 4096, "$lost lost: no more than what the ring could not keep");
my $usage;
ok(TB::Nginx::poll_until(30, sub {
    my ($st, $b) = admin(GET => '/admin/usage?range=1h');
    $usage = $b if $st == 200;
    $usage && $usage->{totals}{requests} + $lost == $n;
}), 'every request is either in the usage history or said lost')
    or diag(TB::Nginx::json_encode($usage->{totals}) . " + $lost lost, of $n");
my @said = TB::Nginx::log_text() =~ /requests ended before the history was written/g;
is(scalar @said, 1, 'said once');
