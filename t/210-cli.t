# The `tokenbiryani` command against a running gateway and the mock: every
# command, its --help, its --json, its errors (one line on stderr, a
# non-zero exit), its tables within 80 columns and without colour off a
# terminal; doctor against the mock, and against one that leaves a header
# out; init, serve and console on a gateway of its own.
use lib 't/lib';
use TB::Nginx;
use TB::Gateway;
use IPC::Open3 ();
use Symbol ();
use Cwd ();
use IO::Socket::INET ();

master_on();
workers(2);
no_shuffle();
mock_start();
$ENV{TEST_NGINX_DEAD_PORT} ||= 19109;     # nothing listens there

our $Cli = $ENV{TEST_NGINX_CLI} || Cwd::abs_path('build/tokenbiryani');

our $Yaml = <<'_EOY_';
>>> tb.yaml
server:
  allow_private_hosts: true     # the mock is on loopback
store:
  backend: sqlite
pricing: builtin
accounts:
  - id: a1
    api_key: sk-a1
    base_url: http://127.0.0.1:${TEST_NGINX_MOCK_PORT}
  - id: a2
    api_key: sk-a2
    base_url: http://127.0.0.1:${TEST_NGINX_MOCK_PORT2}
keys:
  - key: admin-key
    name: ops
    admin: true
  - key: tenant-key
    name: tenant
_EOY_

# runs the command with the block's gateway and admin key unless %o says
# otherwise (env => {...}, no_gateway => 1): (exit code, stdout, stderr)
sub cli {
    my ($args, %o) = @_;
    local %ENV = %ENV;
    delete @ENV{qw(TOKENBIRYANI_URL TOKENBIRYANI_KEY NO_COLOR ANTHROPIC_API_KEY)};
    unless ($o{no_gateway}) {
        $ENV{TOKENBIRYANI_URL} = "http://127.0.0.1:" . TB::Nginx::server_port();
        $ENV{TOKENBIRYANI_KEY} = 'admin-key';
    }
    %ENV = (%ENV, %{ $o{env} // {} });
    my ($in, $out, $err) = (Symbol::gensym(), Symbol::gensym(), Symbol::gensym());
    my $pid = IPC::Open3::open3($in, $out, $err, $Cli, @$args);
    print $in $o{stdin} if defined $o{stdin};
    close $in;
    local $/;
    my $so = <$out> // '';
    my $se = <$err> // '';
    waitpid($pid, 0);
    ($? >> 8, $so, $se);
}

# dollars as the console and the command show them
sub usd {
    my $n = shift;
    return '$0.00' if $n == 0;
    return sprintf('$%.4f', $n) if abs($n) < 0.01;
    return sprintf('$%.2f', $n) if abs($n) < 100;
    sprintf('$%.0f', $n);
}

# the widest line, in characters
sub widest {
    my $w = 0;
    for (split /\n/, $_[0]) { my $l = length($_); utf8::decode(my $d = $_); $l = length($d); $w = $l if $l > $w }
    $w;
}

gateway_suite(yaml => $Yaml);
run_tests();

__DATA__

=== TEST 1: --help for the command and each of its commands; a wrong command line is one line on stderr and exit 2
--- request
GET /healthz
--- check
my ($rc, $out, $err) = cli(['--help']);
is($rc, 0, 'tokenbiryani --help');
like($out, qr/usage: tokenbiryani \[options\] COMMAND/, 'the usage');
for my $cmd (qw(init serve console status doctor accounts keys strategies requests usage sessions)) {
    ($rc, $out, $err) = cli([$cmd, '--help']);
    is($rc, 0, "$cmd --help");
    like($out, qr/^usage: tokenbiryani \Q$cmd\E/, "$cmd: its usage");
    ok(widest($out) <= 80, "$cmd --help fits 80 columns");
}
($rc, $out, $err) = cli(['frobnicate']);
is($rc, 2, 'an unknown command: exit 2');
is($out, '', 'nothing on stdout');
like($err, qr/^tokenbiryani: no command "frobnicate" \(see tokenbiryani --help\)\n\z/, 'one line on stderr');
($rc, $out, $err) = cli(['keys', 'mint']);
is($rc, 2, 'keys mint without a name: exit 2');
like($err, qr/^tokenbiryani: usage: tokenbiryani keys mint\|rescope NAME/, 'saying how');



=== TEST 2: no gateway, or a wrong key: one clear line and a non-zero exit
--- request
GET /healthz
--- check
my ($rc, $out, $err) = cli(['status'], env => { TOKENBIRYANI_URL => 'http://127.0.0.1:1' });
is($rc, 3, 'nothing listening: exit 3');
like($err, qr/^tokenbiryani: no gateway answered at http:\/\/127\.0\.0\.1:1: .*is it running\?/, 'saying so')
    or diag($err);
is(scalar(() = $err =~ /\n/g), 1, 'in one line');
($rc, $out, $err) = cli(['status'], env => { TOKENBIRYANI_KEY => 'not-a-key' });
is($rc, 4, 'a wrong key: exit 4');
like($err, qr/^tokenbiryani: the gateway refused the admin key from \$TOKENBIRYANI_KEY \(401\)/, 'saying whose');
unlike($err, qr/not-a-key/, 'without the key');
($rc, $out, $err) = cli(['status'], env => { TOKENBIRYANI_KEY => 'tenant-key' });
is($rc, 4, 'a tenant key: exit 4');
like($err, qr/refused the admin key .*\(403\)/, 'refused');



=== TEST 3: status: the pool line, each account's state and headroom, within 80 columns, no colour off a terminal; --json
--- request
GET /healthz
--- check
message_with('tenant-key', text => 'warm up') for 1 .. 3;
my ($rc, $out, $err) = cli(['status']);
is($rc, 0, 'status') or diag($err);
like($out, qr/POOL  2 accounts · 2 ready · [\d.]+[kM]? input ready · next reset /, 'the pool line') or diag($out);
like($out, qr/^\s+ACCOUNT\s+STATE\s+REQ\s+INPUT\s+OUTPUT\s+RESET\s+CACHE\s+SPEND$/m, 'the header');
# the requests went to one account (the strategy keeps to it): its row
# has readings, the other's has none yet, and says so with a dash
like($out, qr/^\s+a[12]\s+● ready\s+\d+%\s+\d+%\s+\d+%\s+\d\d:\d\d\s+\d+%\s+\$\d+\.\d{2,4}$/m, 'the row of the account that answered') or diag($out);
like($out, qr/^\s+a[12]\s+● ready\s+—\s+—\s+—\s+—\s+—\s+\$0\.00$/m, 'the other, not read yet') or diag($out);
ok(widest($out) <= 80, 'within 80 columns (' . widest($out) . ')');
unlike($out, qr/\e\[/, 'no colour: not a terminal');
# PACE: no cap in this pool, and no weekly budget: said so
like($out, qr/^  PACE  no budget or spend cap to pace$/m, 'the PACE block: nothing to pace') or diag($out);
like($out, qr/^  none: set pacing\.weekly_budget_usd/m, 'and why there is no weekly reading');
($rc, $out) = cli(['status', '--json']);
my $j = json_decode($out);
is(scalar @{ $j->{accounts} }, 2, '--json: the gateway\'s answer');
is(ref $j->{pacing}{readings}, 'ARRAY', '--json carries pacing');
admin(POST => '/admin/accounts/a2/disable');
($rc, $out) = cli(['status']);
like($out, qr/a2\s+● disabled.*\n\s+← disabled by an operator/, 'a disabled account, and why') or diag($out);



=== TEST 4: keys: minted (its secret once, with the export lines), listed, rescoped, revoked - and what curl then gets
--- request
GET /healthz
--- check
my ($rc, $out, $err) = cli(['keys', 'mint', 'cli-bot', '--models', 'claude-*', '--rpm', '30']);
is($rc, 0, 'minted') or diag($err);
my ($secret) = $out =~ /^  (bir_\S+)$/m;
ok($secret, 'its secret, on a line of its own');
like($out, qr/^export ANTHROPIC_AUTH_TOKEN=\Q$secret\E$/m, 'and the export line');
is(message_with($secret)->{status}, 200, 'it works');
($rc, $out) = cli(['keys', 'list']);
like($out, qr/^cli-bot\s+minted\s+no\s+claude-\*\s+30/m, 'listed') or diag($out);
unlike($out, qr/\Q$secret\E/, 'without its secret');
ok(widest($out) <= 80, 'within 80 columns');
($rc, $out) = cli(['keys', 'rescope', 'cli-bot', '--models', 'gpt-*']);
is($rc, 0, 'rescoped');
is(message_with($secret)->{status}, 403, 'out of its scope now');
($rc, $out, $err) = cli(['keys', 'rescope', 'ops', '--rpm', '5']);
is($rc, 4, 'a file key cannot be rescoped');
like($err, qr/409/, 'the gateway said why');
($rc, $out) = cli(['keys', 'revoke', 'cli-bot']);
is($rc, 0, 'revoked');
is(message_with($secret)->{status}, 401, 'refused now');
($rc, $out) = cli(['keys', 'list', '--json']);
is_deeply([map { $_->{name} } @{ json_decode($out)->{keys} }], ['ops', 'tenant'], '--json');



=== TEST 5: accounts: added (probed), listed, tested, disabled, enabled, removed; a credential the upstream refuses is not stored
--- request
GET /healthz
--- check
mock_config({ credentials => { 'sk-refused' => { behavior => '401' } } });
my ($rc, $out, $err) = cli(['accounts', 'add', 'a3', '--api-key', 'sk-a3-secret-0001',
                            '--base-url', "http://127.0.0.1:$ENV{TEST_NGINX_MOCK_PORT3}"]);
is($rc, 0, 'added') or diag($err);
like($out, qr/^ok credential accepted in \d+\.\d\ds\na3 added/m, 'probed first');
($rc, $out) = cli(['accounts', 'list']);
like($out, qr/^a3\s+anthropic_api\s+ready\s+runtime\s+…0001\s/m, 'listed, its credential masked') or diag($out);
unlike($out, qr/secret/, 'never whole');
ok(widest($out) <= 80, 'within 80 columns');
($rc, $out, $err) = cli(['accounts', 'add', 'a4', '--api-key', 'sk-refused',
                         '--base-url', "http://127.0.0.1:$ENV{TEST_NGINX_MOCK_PORT4}"]);
is($rc, 1, 'a refused credential: exit 1');
like($err, qr/refused this credential: 401.*nothing was stored/, 'saying so');
($rc, $out, $err) = cli(['accounts', 'add', 'a4', '--api-key', 'sk-a4-secret-0004'], env => { TOKENBIRYANI_KEY => 'tenant-key' });
is($rc, 4, 'a key that is not an admin\'s: exit 4, not 1');
# the credential kept off the command line: from stdin, or the environment
($rc, $out, $err) = cli(['accounts', 'add', 'a5', '--api-key', '-', '--base-url', "http://127.0.0.1:$ENV{TEST_NGINX_MOCK_PORT3}"],
                        stdin => "sk-a5-secret-0005\n");
is($rc, 0, '--api-key - reads it from stdin') or diag($err);
($rc, $out, $err) = cli(['accounts', 'add', 'a6', '--base-url', "http://127.0.0.1:$ENV{TEST_NGINX_MOCK_PORT3}"],
                        env => { ANTHROPIC_API_KEY => 'sk-a6-secret-0006' });
is($rc, 0, 'or from $ANTHROPIC_API_KEY') or diag($err);
($rc, $out) = cli(['accounts', 'list']);
like($out, qr/^a5\s.*…0005\s/m, 'a5 with its credential');
like($out, qr/^a6\s.*…0006\s/m, 'a6 with its credential');
($rc, $out, $err) = cli(['accounts', 'add', 'a7', '--api-key', '-'], stdin => '');
is($rc, 2, 'nothing on stdin: exit 2');
cli(['accounts', 'rm', $_]) for qw(a5 a6);
($rc, $out) = cli(['accounts', 'test']);
is($rc, 0, 'every account tested') or diag($out);
like($out, qr/✓ a1\s+credential ok · every limit header present/, 'a1');
like($out, qr/✓ a3\s+credential ok/, 'a3');
($rc, $out) = cli(['accounts', 'disable', 'a3']);
like($out, qr/^a3 disabled \(disabled\)$/, 'disabled');
($rc, $out) = cli(['accounts', 'enable', 'a3']);
like($out, qr/^a3 enabled \(ready\)$/, 'enabled');
($rc, $out) = cli(['accounts', 'rm', 'a3']);
is($rc, 0, 'removed');
($rc, $out, $err) = cli(['accounts', 'rm', 'a1']);
is($rc, 4, 'a file account cannot be removed');
($rc, $out, $err) = cli(['accounts', 'rm', '../keys']);
is($rc, 2, 'an id that is not one');
mock_config({ defaults => { omit_headers => ['anthropic-ratelimit-input-tokens-reset'] } });
($rc, $out) = cli(['accounts', 'test', 'a1']);
like($out, qr/! a1\s+credential ok · 1 rate-limit header missing: input-tokens-reset/, 'a missing header named');



=== TEST 6: doctor: the nine headers came back and parsed; one left out is a problem, exit 1; a refused key too
--- request
GET /healthz
--- check
my $base = "http://127.0.0.1:$ENV{TEST_NGINX_MOCK_PORT}";
my ($rc, $out, $err) = cli(['doctor', '--api-key', 'sk-doc', '--base-url', $base], no_gateway => 1);
is($rc, 0, 'doctor against the mock') or diag($out . $err);
like($out, qr/^POST \Q$base\E\/v1\/messages \(claude-haiku-4-5, max_tokens 1\): 200$/m, 'the request');
is(scalar(() = $out =~ /^  ✓ anthropic-ratelimit-/mg), 9, 'nine ✓');
like($out, qr/^  requests\s+limit 1000 · remaining 999 · reset in \d+\.\ds$/m, 'what the mirror reads');
like($out, qr/^OK every header the gateway needs is present and parsed$/m, 'OK');
mock_config({ credentials => { 'sk-doc' => { omit_headers => ['anthropic-ratelimit-output-tokens-remaining'] } } });
($rc, $out) = cli(['doctor', '--api-key', 'sk-doc', '--base-url', $base], no_gateway => 1);
is($rc, 1, 'one header left out: exit 1');
like($out, qr/^  ✗ anthropic-ratelimit-output-tokens-remaining$/m, 'crossed out');
like($out, qr/output tokens\s+limit 200000 · remaining — /, 'not read');
like($out, qr/^PROBLEM 1 of 9 headers are missing/m, 'the problem');
mock_config({ credentials => { 'sk-bad' => { behavior => '401' } } });
($rc, $out) = cli(['doctor', '--api-key', 'sk-bad', '--base-url', $base], no_gateway => 1);
is($rc, 1, 'a refused key: exit 1');
like($out, qr/PROBLEM the upstream answered 401/, 'saying so');
# the operator's own subscription: its token as a bearer, its six headers
mock_config({ credentials => { 'sk-ant-oat01-doc' => { subscription => { five_hour_requests => 4, seven_day_requests => 40 } } } });
($rc, $out, $err) = cli(['doctor', '--oauth-token', 'sk-ant-oat01-doc', '--base-url', $base], no_gateway => 1);
is($rc, 0, 'doctor with a subscription\'s token') or diag($out . $err);
is(scalar(() = $out =~ /^  ✓ anthropic-ratelimit-unified-(5h|7d)-/mg), 6, 'six ✓');
like($out, qr/^  5h  allowed · 25% used · resets in \d+s$/m, 'the 5-hour window read');
like($out, qr/^  headroom 75% \(1 - the tightest window's use\)$/m, 'the headroom it routes on');
like($out, qr/^OK every header the gateway needs is present and parsed$/m, 'OK');
my $seen = (grep { ($_->{credential} // '') eq 'sk-ant-oat01-doc' } @{ mock_log() })[-1];
is($seen->{headers}{'anthropic-beta'}, 'oauth-2025-04-20', 'sent with the OAuth beta');
($rc, $out, $err) = cli(['doctor'], no_gateway => 1);
is($rc, 2, 'no key at all');
like($err, qr/doctor needs a key: --api-key - \(read from stdin\) or \$ANTHROPIC_API_KEY/, 'saying where one comes from');



=== TEST 7: strategies, requests (and one in the inspector's words), usage, sessions
--- request
GET /healthz
--- check
my $a = message_args('tenant-key');
$a->{headers}{'x-mock-script'} = '529,ok';
$a->{headers}{'x-mock-script-id'} = 'cli-7';
my $r = TB::Nginx::http_request(%$a);
my $id = $r->{headers}{'x-tokenbiryani-request-id'};
message_with('tenant-key', text => "more $_") for 1 .. 2;
my ($rc, $out) = cli(['strategies']);
like($out, qr/^\* sticky_headroom\s+/m, 'the strategy in force starred');
($rc, $out) = cli(['status']);
like($out, qr/POOL  2 accounts · \d ready · [12]\.00M input ready/, 'a million (less a few tokens) as 1.00M, never 1000k') or diag($out);
TB::Nginx::poll_until(2, sub { admin(GET => "/admin/requests/$id") == 200 });
($rc, $out) = cli(['requests']);
like($out, qr/^\Q$id\E\s+200\s+a\d\s+2\s+\d+\s+\$\d\.\d+$/m, 'the list: two attempts, its cost') or diag($out);
ok(widest($out) <= 80, 'within 80 columns');
($rc, $out) = cli(['requests', $id]);
like($out, qr/^attempts  a\d → 529 \(\d+ ms\) → ⏱ \d+ ms → a\d → 200 \(\d+ ms\)$/m, 'the attempt chain, with the backoff between') or diag($out);
like($out, qr/^  1\. a\d\s+chosen among 2 eligible, score \d\.\d{4}\n  2\. a\d\s+chosen among 1 eligible, score \d\.\d{4}, \d+ ms after the one before$/m,
     'every attempt\'s decision') or diag($out);
like($out, qr/^decision  .*\(the last attempt's\)$/m, 'the candidates are the last attempt\'s, said so');
like($out, qr/^tokens    in \d+ · out \d+ · cache read \d+ · cache write \d+$/m, 'the tokens');
like($out, qr/^decision  sticky_headroom, a\d chosen/m, 'the decision');
like($out, qr/^  a\d\s+chosen\s+\d\.\d{4}/m, 'the candidates with their scores');
TB::Nginx::poll_until(3, sub { my (undef, $u) = admin(GET => '/admin/usage?range=1h'); ($u->{totals}{requests} // 0) >= 3 });
($rc, $out) = cli(['usage', '--range', '1h', '--by', 'key']);
like($out, qr/^tenant\s+3\s+/m, 'usage by key') or diag($out);
my (undef, $u) = admin(GET => '/admin/usage?range=1h&by=key');
like($out, qr/^all\s+$u->{totals}{requests}\s+$u->{totals}{input_tokens}\s+$u->{totals}{output_tokens}\s+\d+%\s+\d+\s+\$\d\.\d{6}$/m,
     'the totals: requests, tokens, cache, errors, cost') or diag($out);
ok(widest($out) <= 80, 'within 80 columns');
($rc, $out) = cli(['sessions']);
like($out, qr/^SESSION\s+KEY\s+ACCOUNT\s+TURNS\s+COST\s+RUNAWAY$/m, 'sessions');
like($out, qr/^[0-9a-f]{16}\s+tenant\s+a\d\s+1\s+\$/m, 'a conversation');
($rc, $out, my $err) = cli(['usage', '--by', 'planet']);
is($rc, 2, 'a wrong grouping: exit 2');
# one meaning of spend: the API's figure, in the command's every table, with its window said
my (undef, $acs) = admin(GET => '/admin/accounts');
my %want = map { $_->{id} => usd($_->{usage}{window_usd}) } @{ $acs->{accounts} };
is($acs->{accounts}[0]{usage}{window_hours}, 24, 'the API names the window');
($rc, $out) = cli(['status']);
for my $id (sort keys %want) {
    like($out, qr/^  \Q$id\E\s.*\s\Q$want{$id}\E$/m, "status: $id spent $want{$id}, as the API says") or diag($out);
}
like($out, qr/^  SPEND: the last 24 h, the spend caps' window, in flight included$/m, 'status says which spend');
($rc, $out) = cli(['accounts', 'list']);
for my $id (sort keys %want) {
    like($out, qr/^\Q$id\E\s.*\s\Q$want{$id}\E$/m, "accounts list: $id the same") or diag($out);
}
like($out, qr/^SPEND: the last 24 h/m, 'and says which');
($rc, $out) = cli(['usage', '--range', '1h']);
like($out, qr/\bFAILED\b.*\n(?:.*\n)*FAILED: answered requests that ended in an error/, 'usage counts answered requests, and says so');



=== TEST 8: colour only on a terminal, and never with NO_COLOR
--- request
GET /healthz
--- check
# a pseudo-terminal through script(1)
my $cmd = "TOKENBIRYANI_URL=http://127.0.0.1:" . TB::Nginx::server_port() . " TOKENBIRYANI_KEY=admin-key $::Cli status";
my $tty = `script -qec '$cmd' /dev/null 2>&1`;
like($tty, qr/\e\[32m●/, 'on a terminal: a green bullet') or diag($tty);
$tty = `script -qec 'NO_COLOR=1 $cmd' /dev/null 2>&1`;
unlike($tty, qr/\e\[3\dm/, 'with NO_COLOR: none');
like($tty, qr/● ready/, 'the same table');



=== TEST 9: init, serve -d, console: a gateway of its own, signed in through a one-time ticket, never a key in a URL
--- request
GET /healthz
--- check
my $dir = TB::Nginx::servroot() . '/own';
system('rm', '-rf', $dir);
mkdir $dir or die "$dir: $!";
chmod 0755, $dir;
my $port = TB::Nginx::server_port() + 7;
my ($rc, $out, $err) = cli(['init', '--dir', $dir, '--listen', "127.0.0.1:$port", '--allow-private-hosts'], no_gateway => 1);
is($rc, 0, 'init') or diag($err);
my ($client) = $out =~ /^export ANTHROPIC_AUTH_TOKEN=(bir_[0-9a-f]{48})$/m;
ok($client, 'a key in the export lines');
ok(-f "$dir/tokenbiryani.yaml" && -f "$dir/nginx.conf", 'the files');
my ($key) = TB::Nginx::slurp("$dir/tokenbiryani.yaml") =~ /key: (bir_[0-9a-f]{48})\s+name: admin\s[^\n]*\n\s+admin: true/;
ok($key, 'an admin key in the YAML file');
isnt($key, $client, 'not the one the export lines give clients');
is(sprintf('%o', (stat "$dir/tokenbiryani.yaml")[2] & 0777), '600', 'the YAML file (it holds the key) is 0600');
($rc, $out, $err) = cli(['init', '--dir', $dir], no_gateway => 1);
is($rc, 1, 'not again without --force');
like($err, qr/is there already: --force/, 'saying so');
($rc, $out, $err) = cli(['serve', '--dir', $dir, '-d'], no_gateway => 1);
is($rc, 0, 'serve -d') or diag($out . $err . TB::Nginx::slurp("$dir/.tokenbiryani/logs/error.log"));
like($out, qr/running on http:\/\/127\.0\.0\.1:$port/, 'where');
# the other commands find it where init wrote
my @in = (no_gateway => 1, env => { TOKENBIRYANI_KEY => $key });
my $here = Cwd::getcwd();
chdir $dir;
($rc, $out, $err) = cli(['status'], no_gateway => 1);
chdir $here;
is($rc, 0, 'status, run where init wrote, finds it and its key') or diag($err);
like($out, qr/POOL  0 accounts/, 'an empty pool');
like($out, qr/no accounts yet/, 'saying what next');
chdir $dir;
($rc, $out, $err) = cli(['console', '--no-browser'], no_gateway => 1);
chdir $here;
is($rc, 0, 'console') or diag($err);
my ($url, $ticket) = $out =~ /^(http:\/\/127\.0\.0\.1:$port\/console\/#ticket=([0-9a-f]{32}))$/m;
ok($url, 'the console\'s address with a ticket in its fragment') or diag($out);
unlike($out, qr/\Q$key\E/, 'never the key');
# with a desktop: the browser is given a file of this user's, not the ticket
my $stub = TB::Nginx::servroot() . '/stub';
mkdir $stub;
open(my $sh, '>', "$stub/xdg-open") or die $!;
print $sh "#!/bin/sh\necho \"\$@\" > $stub/argv\ncp \"\$1\" $stub/page\nstat -c %a \"\$1\" > $stub/mode\n";
close $sh;
chmod 0755, "$stub/xdg-open";
chdir $dir;
($rc, my $out2, $err) = cli(['console'], no_gateway => 1, env => { DISPLAY => ':99', PATH => "$stub:$ENV{PATH}", XDG_RUNTIME_DIR => $stub });
chdir $here;
is($rc, 0, 'console, with a desktop');
ok(TB::Nginx::poll_until(5, sub { -s "$stub/mode" }), 'the browser was opened');
my ($ticket2) = $out2 =~ /#ticket=([0-9a-f]{32})$/m;
unlike(TB::Nginx::slurp("$stub/argv"), qr/ticket|\Q$ticket2\E/, 'no ticket on its command line');
like(TB::Nginx::slurp("$stub/argv"), qr{^\Q$stub\E/tokenbiryani-console-\w{6}\.html$}, 'a file');
is(TB::Nginx::slurp("$stub/mode"), "600\n", 'of this user\'s only');
like(TB::Nginx::slurp("$stub/page"), qr{http-equiv="refresh" content="0;url=http://127\.0\.0\.1:$port/console/#ticket=\Q$ticket2\E"}, 'that sends the browser on');
my $r = TB::Nginx::http_request(method => 'POST', path => '/console/ticket', port => $port,
                                body => qq({"ticket":"$ticket"}), headers => { 'content-type' => 'application/json' });
is($r->{status}, 200, 'the page redeems the ticket');
is(json_decode($r->{body})->{key}, $key, 'for the admin key');
$r = TB::Nginx::http_request(method => 'POST', path => '/console/ticket', port => $port,
                             body => qq({"ticket":"$ticket"}), headers => { 'content-type' => 'application/json' });
is($r->{status}, 400, 'once only');
unlike(TB::Nginx::slurp("$dir/.tokenbiryani/logs/access.log") . TB::Nginx::slurp("$dir/.tokenbiryani/logs/error.log"),
       qr/\Q$key\E/, 'the key is in no log');
# the README's quickstart from the command: an account, then the export lines work
chdir $dir;
($rc, $out, $err) = cli(['accounts', 'add', 'acct-01', '--api-key', 'sk-a1', '--base-url', "http://127.0.0.1:$ENV{TEST_NGINX_MOCK_PORT}"], no_gateway => 1);
chdir $here;
is($rc, 0, 'accounts add, where init wrote') or diag($err);
like($out, qr/acct-01 added/, 'added');
$r = TB::Nginx::http_request(method => 'POST', path => '/v1/messages', port => $port,
                             body => '{"model":"claude-sonnet-4-6","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}',
                             headers => { 'content-type' => 'application/json', 'authorization' => "Bearer $client", 'anthropic-version' => '2023-06-01' });
is($r->{status}, 200, 'the export lines\' key makes a request') or diag($r->{body});
$r = TB::Nginx::http_request(method => 'GET', path => '/admin/status', port => $port, headers => { 'x-api-key' => $client });
is($r->{status}, 403, 'and cannot reach /admin');
unlike(TB::Nginx::slurp("$dir/.tokenbiryani/logs/access.log") . TB::Nginx::slurp("$dir/.tokenbiryani/logs/error.log"),
       qr/sk-a1|\Q$client\E/, 'neither the credential nor the client key in a log');
# another directory's .tokenbiryani/url does not get a key given from elsewhere
my $other = TB::Nginx::servroot() . '/other';
system('rm', '-rf', $other);
mkdir $other; mkdir "$other/.tokenbiryani";
open(my $uf, '>', "$other/.tokenbiryani/url") or die $!;
print $uf "http://192.0.2.1:8787\n";
close $uf;
chdir $other;
($rc, $out, $err) = cli(['status'], no_gateway => 1, env => { TOKENBIRYANI_KEY => $key });
chdir $here;
is($rc, 2, 'a remote address in a directory\'s url file, a key from the environment: refused');
like($err, qr/names http:\/\/192\.0\.2\.1:8787, not this machine: the key from \$TOKENBIRYANI_KEY goes there only with --url/, 'saying so');
# init refuses what nginx.conf could not hold as it is
($rc, $out, $err) = cli(['init', '--dir', $other, '--listen', '8787'], no_gateway => 1);
is($rc, 2, '--listen without a host');
mkdir "$other/a b";
($rc, $out, $err) = cli(['init', '--dir', "$other/a b"], no_gateway => 1);
is($rc, 2, 'a directory with a space');
like($err, qr/a b: a path of letters, digits/, 'named');
ok(!-e "$other/a b/nginx.conf", 'nothing written');
# started twice: said, not five bind() errors
($rc, $out, $err) = cli(['serve', '--dir', $dir, '-d'], no_gateway => 1);
is($rc, 1, 'serve -d while it runs: exit 1');
like($err, qr/^tokenbiryani: a gateway is already running in \Q$dir\E \(pid \d+\): `tokenbiryani serve --stop` first\n\z/, 'saying so, in one line')
    or diag($err);
# the YAML broken by hand: the command says so, and --stop still stops it
my $master = TB::Nginx::slurp("$dir/.tokenbiryani/logs/nginx.pid") =~ s/\s+//gr;
TB::Nginx::spew("$dir/tokenbiryani.yaml", "accounts: [\n  - id: broken\n");
chdir $dir;
($rc, $out, $err) = cli(['status'], no_gateway => 1);
chdir $here;
is($rc, 2, 'a broken YAML file: exit 2');
like($err, qr/tokenbiryani\.yaml cannot be read: /, 'said as a file that cannot be read') or diag($err);
unlike($err, qr/init` writes one/, 'not as a missing key');
($rc, $out, $err) = cli(['serve', '--dir', $dir, '--stop'], no_gateway => 1);
is($rc, 0, 'stopped, the YAML broken') or diag($err);
like($out, qr/^stopped the gateway in \Q$dir\E \(pid $master\)$/m, 'saying which');
ok(!kill(0, $master), 'its master is gone');
($rc, $out, $err) = cli(['serve', '--dir', $dir, '--stop'], no_gateway => 1);
is($rc, 1, 'nothing left to stop: exit 1');
like($err, qr/no gateway is running in/, 'saying so');



=== TEST 10: secrets never need the command line: --key - and --api-key - read stdin; one given inline still works, with a warning, and is blanked from the process's arguments
--- request
GET /healthz
--- check
my ($rc, $out, $err) = cli(['status', '--json', '--key', '-'], stdin => "admin-key\n", env => { TOKENBIRYANI_KEY => '' });
is($rc, 0, 'status with --key - (stdin)') or diag($err);
is($err, '', 'no warning');
($rc, $out, $err) = cli(['status', '--json', '--key', 'admin-key'], env => { TOKENBIRYANI_KEY => '' });
is($rc, 0, 'status with --key inline');
like($err, qr/warning: --key on the command line can be read by other users.*--key - \(stdin\)/, 'with a warning');
my $base = "http://127.0.0.1:$ENV{TEST_NGINX_MOCK_PORT}";
($rc, $out, $err) = cli(['doctor', '--api-key', '-', '--base-url', $base], stdin => "sk-doc\n", no_gateway => 1);
is($rc, 0, 'doctor --api-key -') or diag($err);
is($err, '', 'no warning');
is(mock_log()->[-1]{credential}, 'sk-doc', 'the key read from stdin was used');
# the inline one, as the process table shows it while the command runs (a
# server that takes the connection and never answers holds it there)
my $l = IO::Socket::INET->new(Listen => 4, LocalAddr => '127.0.0.1', LocalPort => 0) or die "listen: $!\n";
my ($in, $o, $e) = (Symbol::gensym(), Symbol::gensym(), Symbol::gensym());
my $pid = IPC::Open3::open3($in, $o, $e, $Cli, 'doctor', '--api-key', 'sk-visible-secret',
                            '--base-url', 'http://127.0.0.1:' . $l->sockport());
my $cmdline = '';
ok(TB::Nginx::poll_until(5, sub {
    $cmdline = TB::Nginx::slurp("/proc/$pid/cmdline") // '';
    $cmdline =~ /x{17}/ }), 'the command is running, its arguments read');
kill 'TERM', $pid;
waitpid($pid, 0);
unlike($cmdline, qr/sk-visible-secret/, 'the secret is blanked from /proc/<pid>/cmdline once parsed');
like($cmdline, qr/--api-key\0x{17}\0/, 'in its place as many x');



=== TEST 11: make run hands clients a client key (never the admin key), and keeps a YAML file the operator edited
--- request
GET /healthz
--- check
my $run = TB::Nginx::servroot() . '/make-run';
system('rm', '-rf', $run);
my $port = server_port() + 21;
local $ENV{TOKENBIRYANI_LISTEN} = "127.0.0.1:$port";
local $ENV{TOKENBIRYANI_MOCK_PORT} = 19301;
delete local $ENV{ANTHROPIC_API_KEY};
my $module = (split ' ', $ENV{TEST_NGINX_LOAD_MODULES})[0];
my $start = sub { scalar `src/tools/run.sh start $ENV{PWD} $module $run 2>&1` };
my $out = $start->();
is($?, 0, 'started') or diag($out);
my ($client) = $out =~ /^export ANTHROPIC_AUTH_TOKEN=(\S+)$/m;
my ($admin) = $out =~ /^The admin key, for the console and the command: (\S+)$/m;
ok($client && $admin && $client ne $admin, 'the export lines carry a key of their own');
my $m = TB::Nginx::http_request(method => 'POST', path => '/v1/messages', port => $port, body => msg_body(),
                                headers => { 'x-api-key' => $client, 'content-type' => 'application/json' });
is($m->{status}, 200, 'the export lines\' key is served');
is(TB::Nginx::http_request(method => 'GET', path => '/admin/status', port => $port,
                           headers => { 'x-api-key' => $client })->{status}, 403, 'and refused /admin');
# the Batches and Files APIs, served against the mock
my $bt = TB::Nginx::http_request(method => 'POST', path => '/v1/messages/batches', port => $port,
    headers => { 'x-api-key' => $client, 'content-type' => 'application/json' },
    body => TB::Nginx::json_encode({ requests => [{ custom_id => 'c1', params => { model => 'claude-sonnet-4-6', max_tokens => 5,
                                                                                messages => [{ role => 'user', content => 'hi' }] } }] }));
is($bt->{status}, 200, 'a batch made');
like(TB::Nginx::json_decode($bt->{body})->{id} // '', qr/^msgbatch_/, 'its id');
my $fl = TB::Nginx::http_request(method => 'GET', path => '/v1/files', port => $port, headers => { 'x-api-key' => $client });
is($fl->{status}, 200, 'the Files API: listed');
is(TB::Nginx::http_request(method => 'GET', path => '/admin/status', port => $port,
                           headers => { 'x-api-key' => $admin })->{status}, 200, 'the admin key opens /admin');
# the demo subscription: its windows as the mock plays them
my $sm = TB::Nginx::http_request(method => 'POST', path => '/admin/accounts/subscription/test', port => $port,
                                 headers => { 'x-api-key' => $admin, 'content-type' => 'application/json' }, body => '{}');
is($sm->{status}, 200, 'the demo subscription answers its test') or diag($sm->{body});
my $mlog = [map { TB::Nginx::json_decode($_) } grep { /sk-ant-oat01-demo-subscription/ } split /\n/, TB::Nginx::slurp("$run/logs/mock.log")];
is($mlog->[-1]{headers}{authorization}, 'Bearer sk-ant-oat01-demo-subscription', '... sent as a bearer');
is($mlog->[-1]{status}, 200, '... and the mock took it as a subscription');
# the Efficiency page's four answers, from this traffic
my $eff = sub { my $x = TB::Nginx::http_request(method => 'GET', path => $_[0], port => $port, headers => { 'x-api-key' => $admin });
                ($x->{status}, TB::Nginx::json_decode($x->{body} || '{}')) };
my ($es, $ej) = $eff->('/admin/pacing');
is($es, 200, '/admin/pacing');
ok((grep { $_->{scope} eq 'pool' } @{ $ej->{readings} }), 'the week\'s budget read (the SQLite history)') or diag(TB::Nginx::json_encode($ej));
ok((grep { $_->{scope} eq 'subscription' } @{ $ej->{readings} }), 'the demo subscription\'s windows read') or diag(TB::Nginx::json_encode($ej));
($es, $ej) = $eff->('/admin/cache-advice');
is($es, 200, '/admin/cache-advice');
ok($ej->{requests_read} >= 1, 'it read the requests served');
($es, $ej) = $eff->('/admin/sessions');
is($es, 200, '/admin/sessions');
($es, $ej) = $eff->('/admin/estimation');
is($es, 200, '/admin/estimation');
# the operator's edit: kept
my $yaml = "$run/conf/tokenbiryani.yaml";
my $edited = TB::Nginx::slurp($yaml) =~ s/pricing: builtin/pricing: builtin      # mine/r;
TB::Nginx::spew($yaml, $edited);
$out = $start->();
is($?, 0, 'started again') or diag($out);
like($out, qr/your edited \Q$yaml\E, kept as it is/, 'saying the edited file is kept');
is(TB::Nginx::slurp($yaml), $edited, 'byte for byte');
`src/tools/run.sh stop $ENV{PWD} $module $run 2>&1`;
# not edited: written again (with the keys it had)
unlink $yaml;
$out = $start->();
like(TB::Nginx::slurp($yaml), qr/\Q$client\E/, 'a deleted file is written again, its keys kept');
`src/tools/run.sh stop $ENV{PWD} $module $run 2>&1`;



=== TEST 12: the command tells the truth: an option a command does not take is exit 2; a 429 is a good credential that cannot serve now; reasons whole; hints in the command's flags
--- user_files
>>> tb.yaml
server:
  allow_private_hosts: true
store:
  backend: sqlite
accounts:
  - id: a1
    api_key: sk-a1
    base_url: http://127.0.0.1:${TEST_NGINX_MOCK_PORT}
  - id: a2
    api_key: sk-a2
    base_url: http://127.0.0.1:${TEST_NGINX_MOCK_PORT2}
  - id: a3
    type: bedrock
    options:
      region: us-east-1
keys:
  - key: admin-key
    name: ops
    admin: true
  - key: tenant-key
    name: tenant
--- request
GET /healthz
--- check
my ($rc, $out, $err) = cli(['status', '--bogus']);
is($rc, 2, 'status --bogus: exit 2');
like($err, qr/^tokenbiryani: status takes no option --bogus \(see tokenbiryani status --help\)\n\z/, 'saying so') or diag($err);
is($out, '', 'and doing nothing');
($rc, $out, $err) = cli(['keys', 'list', '--range', '1h']);
is($rc, 2, 'an option of another command: exit 2');
($rc, $out, $err) = cli(['usage', '--range', '2h']);
is($rc, 2, 'usage --range 2h: exit 2, not a refusal from the gateway');
like($err, qr/--range 1h\|24h\|7d\|30d/, 'naming the ranges');
($rc) = cli(['status', '--json', '--no-color']);
is($rc, 0, 'the global options go with every command');
# a reason as the gateway gives it, however long (a3 has no credentials)
my (undef, $st) = admin(GET => '/admin/status');
my ($acct) = grep { $_->{id} eq 'a3' } @{ $st->{accounts} };
ok($acct && length($acct->{reason}) > 72, 'a reason longer than a line') or diag(explain($st->{accounts}));
($rc, $out) = cli(['status']);
my ($said) = $out =~ /^  \Q$acct->{id}\E .*\n  \s*← ((?:.*\n)(?: {6}.*\n)*)/m;
$said = join ' ', map { s/^\s+|\s+$//gr } split /\n/, $said // '';
is($said, $acct->{reason}, 'whole, wrapped at spaces') or diag($out);
ok(widest($out) <= 80, 'within 80 columns');
# the API's hint in the command's words
mock_config({ credentials => { 'sk-refused' => { behavior => '401' } } });
($rc, $out, $err) = cli(['accounts', 'add', 'a4', '--api-key', 'sk-refused',
                         '--base-url', "http://127.0.0.1:$ENV{TEST_NGINX_MOCK_PORT4}"]);
is($rc, 1, 'a refused credential: exit 1');
like($err, qr/\(--no-test stores it untested\)/, 'the hint names --no-test') or diag($err);
unlike($err, qr/"probe"/, 'not the API\'s field');
# last, as it cools a2 for 90 s: a credential the upstream rate-limits is good, and busy
mock_config({ credentials => { 'sk-a2' => { behavior => '429:90' } } });
($rc, $out) = cli(['accounts', 'test', 'a2']);
is($rc, 0, 'a 429 is not a failed test');
like($out, qr/^  ✓ a2\s+credential ok · rate-limited for 90 s$/m, 'saying for how long') or diag($out);



=== TEST 13: status counts failing accounts apart from ready ones: the breaker half-open or connects failing is not "ready"
--- user_files
>>> tb.yaml
server:
  allow_private_hosts: true
breaker:
  failure_threshold: 2
  cooldown_seconds: 1
accounts:
  - id: a1
    api_key: sk-a1
    base_url: http://127.0.0.1:${TEST_NGINX_MOCK_PORT}
  - id: a2
    api_key: sk-a2
    base_url: http://127.0.0.1:${TEST_NGINX_DEAD_PORT}
    priority: 1
keys:
  - key: admin-key
    name: ops
    admin: true
  - key: tenant-key
    name: tenant
  - key: pin-a2
    name: pinned
    pool: [a2]
--- request
GET /healthz
--- check
# a2 first in the order: it fails to connect, a1 serves
is(message_with('tenant-key')->{status}, 200, 'served by a1 after a2 failed to connect');
my ($rc, $out) = cli(['status']);
like($out, qr/POOL  2 accounts · 1 ready · 1 failing · /, 'one ready, one failing') or diag($out);
my ($why) = $out =~ /^  a2\s+● failing .*\n\s+← ((?:.*\n)(?: {6}.*\n)*)/m;
$why = join ' ', map { s/^\s+|\s+$//gr } split /\n/, $why // '';
like($why, qr/^no answer: connect error, reset or TLS failure; failing for \d\d:\d\d, no success yet$/,
     'a2: why, since when, never a success') or diag($out);
ok(widest($out) <= 80, 'within 80 columns');
# two in a row open the breaker; a second later it is half-open: still failing
my $pinned = { %{ message_args('pin-a2') } };
$pinned->{headers}{'x-tokenbiryani-max-wait'} = 0;
my $r = TB::Nginx::http_request(%$pinned);
is($r->{status}, 429, 'a key of a2 alone: a2 fails again, its breaker opens, nothing else to try: 429');
is($r->{headers}{'retry-after'}, 1, 'retry-after: when it half-opens');
my (undef, $st) = admin(GET => '/admin/status');
my ($a2) = grep { $_->{id} eq 'a2' } @{ $st->{accounts} };
is($a2->{breaker}{state}, 'open', 'a2\'s breaker opened');
ok(TB::Nginx::poll_until(3, sub { (undef, $st) = admin(GET => '/admin/status');
                                  ($a2) = grep { $_->{id} eq 'a2' } @{ $st->{accounts} };
                                  $a2->{breaker}{state} eq 'half_open' }), 'half-open after its second');
is($a2->{state}, 'failing', 'half-open is not ready');
is($st->{pool}{ready}, 1, 'the pool counts one ready');
($rc, $out) = cli(['status']);
($why) = $out =~ /^  a2\s+● failing .*\n\s+← ((?:.*\n)(?: {6}.*\n)*)/m;
$why = join ' ', map { s/^\s+|\s+$//gr } split /\n/, $why // '';
like($why, qr/^circuit open after 2 failures in a row: no answer: connect error, reset or TLS failure; failing for/,
     'the command says so') or diag($out);
my $h = json_decode(TB::Nginx::http_request(method => 'GET', path => '/healthz')->{body});
is($h->{failing}, 1, '/healthz counts it');
ok(defined $h->{last_success_ago}, 'and when the pool last answered well');



=== TEST 14: status's PACE block: every cap and the weekly budget with its verdict, the tightest first, within 80 columns
--- user_files
>>> tb.yaml
store:
  backend: sqlite
pricing: builtin
pacing:
  weekly_budget_usd: 20
  # "behind" once a tenth of the week has gone with nothing spent,
  # whatever day the suite runs on: the verdicts are checked at fixed
  # times in t/unit/test_pacing.c, the block's layout here
  behind_threshold: 1
accounts:
  - id: a1
    api_key: sk-a1
    base_url: http://127.0.0.1:${TEST_NGINX_MOCK_PORT}
    spend_cap_usd: 10
keys:
  - key: admin-key
    name: ops
    admin: true
  - key: tenant-key
    name: tenant
    spend_cap_usd: 0.0001
--- request
GET /healthz
--- check
is(message_with('tenant-key')->{status}, 200, 'one request, past its cap');
TB::Nginx::poll_until(3, sub { my (undef, $u) = admin(GET => '/admin/usage?range=1h'); ($u->{totals}{requests} // 0) >= 1 });
my ($rc, $out) = cli(['status']);
is($rc, 0, 'status');
like($out, qr/^  PACE  key tenant's \$0\.0001 spend cap is reached: room again in /m, 'the tightest first') or diag($out);
like($out, qr/^  pool\s+weekly budget\s+on pace\s+on pace: 0% of the pool's \$20\.00 weekly\n\s{35}budget used/m, 'the week, wrapped under its column') or diag($out);
like($out, qr/^  key\s+tenant\s+reached\s+key tenant's/m, 'the key');
like($out, qr/^  account\s+a1\s+(on pace|idle)\s+/m, 'the account');
ok(widest($out) <= 80, 'within 80 columns (' . widest($out) . ')');
