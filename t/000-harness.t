# Self-test of the TB::Nginx harness with stock nginx only (no tokenbiryani module).
#
# 1. Blocks below: every section and helper, run with master_process on and 2 workers.
# 2. The mock group (TEST 20-21) runs when t/mock/mock.py exists, else it is skipped.
# 3. After run_tests: a nested run of a small .t file whose blocks are built to fail
#    (wrong status, unlisted [crit], nginx not starting, timeout, dying --- check, ...):
#    the harness must report each one as "not ok" - a harness that cannot fail proves nothing.
use lib 't/lib';
use TB::Nginx;
use IO::Socket::INET;
use File::Temp qw(tempdir);
use Cwd qw(getcwd);
use Time::HiRes qw(time);
use List::Util qw(max);

delete $ENV{TEST_NGINX_LOAD_MODULES};   # stock nginx only; load_module lines are tested below
master_on();
workers(2);

# A TCP listener that never accepts: a proxied request to it hangs until the client goes away.
$ENV{TEST_NGINX_BLACKHOLE_PORT} ||= 19180;
our $Blackhole = IO::Socket::INET->new(LocalAddr => '127.0.0.1', Listen => 128, ReuseAddr => 1,
                                       LocalPort => $ENV{TEST_NGINX_BLACKHOLE_PORT})
    or die "cannot listen on 127.0.0.1:$ENV{TEST_NGINX_BLACKHOLE_PORT}: $@\n";

our $have_mock = -f 't/mock/mock.py';
if ($have_mock) { mock_start() }
else { diag('t/mock/mock.py is absent: the mock blocks (TEST 20-21) are skipped') }

my $t0 = time;
run_tests();
note(sprintf 'run_tests: %.2f s for %d blocks', time - $t0, scalar blocks());

# ------------------------------------------------------------------ after the blocks
ok(!defined nginx_pid(), 'no nginx left running after run_tests');
ok(!TB::Nginx::listening(server_port()), 'port ' . server_port() . ' is free again');

# parse_response on responses nginx would not produce on purpose
{
    my $p = \&TB::Nginx::parse_response;
    my $r = $p->("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-A: 1\r\nx-a: 2\r\n\r\n"
                 . "5\r\nhello\r\n1;ext=1\r\n!\r\n0\r\nTrailer: t\r\n\r\n");
    is($r->{body}, 'hello!', 'chunked: decoded, chunk extension and trailer accepted');
    is($r->{headers}{'x-a'}, '1, 2', 'repeated headers joined case-insensitively');
    ok(!$r->{error}, 'chunked: no error');
    $r = $p->("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n");
    like($r->{error}, qr/no last chunk/, 'chunked without the last chunk is an error');
    is($r->{body}, 'hello', '... keeping what was decoded');
    $r = $p->("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n9\r\nhel");
    like($r->{error}, qr/truncated/, 'truncated chunk is an error');
    $r = $p->("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc");
    like($r->{error}, qr/truncated: 10 bytes announced, 3/, 'short Content-Length body');
    $r = $p->("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok");
    is("$r->{status} $r->{body}", '201 ok', 'interim 100 skipped');
    $r = $p->('HTTP/1.1 200 O');
    ok(!defined $r->{status} && $r->{error}, 'incomplete header: no status');
}

# Run $blocks as a .t file of its own (own port and servroot); returns (exit code, TAP, stderr).
my $meta_port = server_port() + 2;
sub nested_run {
    my ($blocks, $preamble, %env) = @_;
    my $root = getcwd();
    my $tmp  = tempdir('tb-meta-XXXXXX', TMPDIR => 1, CLEANUP => 1);
    chmod 0755, $tmp;
    open my $fh, '>', "$tmp/meta.t" or die "$tmp/meta.t: $!";
    print $fh "use TB::Nginx;\nno_shuffle();\n$preamble\nrun_tests();\n__DATA__\n", $blocks;
    close $fh;
    local @ENV{keys %env} = values %env;
    local $ENV{TEST_NGINX_SERVER_PORT} = $meta_port;
    local $ENV{TEST_NGINX_SERVROOT} = "$tmp/servroot";
    my $t1 = time;
    system("cd '$root' && '$^X' -I'$root/t/lib' '$tmp/meta.t' > '$tmp/out' 2> '$tmp/err'");
    my $rc = $? >> 8;
    note(sprintf 'nested run: %.2f s', time - $t1);
    ($rc, (map { local $/; open my $f, '<', "$tmp/$_" or die; scalar <$f> } qw(out err)), $tmp);
}

# nested run: a block preprocessor fills in what blocks leave out, and
# --- check runs in the suite's own package
{
    my ($rc, $out, $err) = nested_run(<<'_EOB_', <<'_EOP_');
=== TEST 1: the config comes from the preprocessor
--- request
GET /pre
--- response_body
from the preprocessor
--- check
# unqualified: found only in the suite's package
die "the suite's variable is not visible\n" unless ($Marker // '') eq 'suite';
die "the suite's sub is not visible\n" unless suite_sub() eq 'suite';

=== TEST 2: a block's own config wins
--- config
    location = /pre { return 200 "own\n"; }
--- request
GET /pre
--- response_body
own
_EOB_
our $Marker = 'suite';
sub suite_sub { 'suite' }
add_block_preprocessor(sub {
    my $b = shift;
    $b->set_value(config => qq{    location = /pre { return 200 "from the preprocessor\\n"; }\n})
        unless defined $b->config;
});
_EOP_
    is($rc, 0, 'a suite with a block preprocessor passes') or diag("$out\n$err");
    like($out, qr/^ok \d+ - \S+ TEST 1: the config comes from the preprocessor - response_body/m,
         '... the block without a config got the preprocessor\'s');
    like($out, qr/^ok \d+ - \S+ TEST 2: a block's own config wins - response_body/m,
         '... the block with its own kept it');
    unlike($out, qr/check died/, '... and --- check ran in the suite\'s package');
}

# nested run: TB::Spec's declarative sections pass on what happened and fail
# on anything else (stock nginx proxying to the mock: no gateway needed)
SKIP: {
    skip('t/mock/mock.py is absent', 16) unless $have_mock;
    my ($rc, $out, $err) = nested_run(<<'_EOB_', <<'_EOP_');
=== TEST 1: what happened, as sections
--- mock
{"credentials": {"sk-spec": {"requests_limit": 1, "window_seconds": 60}}}
--- request eval
["POST /v1/messages\n" . $::Body, "POST /v1/messages\n" . $::Body]
--- error_code eval
[200, 429]
--- upstream
method path         status credential h:anthropic-version h:x-nothing
POST   /v1/messages 200    sk-spec    2023-06-01          -
POST   ~^/v1/mess   429    *          ~^2023-             -
--- verbatim: 2
--- check
die "no --- check after the sections\n" unless @responses == 2;

=== TEST 2: a wrong status, a missing request and a verbatim of none fail
--- request eval
"POST /v1/messages\n" . $::Body
--- upstream
status
201
200
--- upstream_distinct: path
--- verbatim: 2

=== TEST 3: none, when a request went up, fails
--- request eval
"POST /v1/messages\n" . $::Body
--- upstream: none

=== TEST 4: each form of an expectation fails on the wrong value
--- check
TB::Spec::cmp_ok_spec(5, '> 7', 'spec gt');
TB::Spec::cmp_ok_spec('abc', '~^x', 'spec like');
TB::Spec::cmp_ok_spec(1, 'null', 'spec null');
TB::Spec::cmp_ok_spec(0, 'true', 'spec true');
TB::Spec::cmp_ok_spec('a b', '"a c"', 'spec string');
TB::Spec::cmp_ok_spec(3, '3', 'spec equal');
_EOB_
use TB::Spec;
our $Body = '{"model":"claude-sonnet-4-6","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}';
TB::Spec::install();
add_block_preprocessor(sub {
    my $b = shift;
    $b->set_value(init => "mock_reset();\n" . ($b->init // ''));
    $b->set_value(config => "    location /v1/ { proxy_pass http://127.0.0.1:\$TEST_NGINX_MOCK_PORT;\n"
        . "        proxy_set_header x-api-key sk-spec; proxy_set_header content-type application/json;\n"
        . "        proxy_set_header anthropic-version 2023-06-01; }\n");
});
_EOP_
    my %res;
    while ($out =~ /^(ok|not ok) \d+ - (.*)$/mg) { $res{$2} //= $1 }     # the first: TEST 1's
    my ($first) = $out =~ /\A(.*?)^\S+ \d+ - \S+ TEST 2: /ms;      # TEST 1's lines
    my @t1 = grep { /^the upstream saw|^upstream request|^the client got exactly|^\.\.\. the same length/ }
             map { /^(?:not )?ok \d+ - (.*)$/ ? $1 : () } split /\n/, $first // '';
    is(scalar(grep { $res{$_} eq 'ok' } @t1), scalar(@t1), 'spec 1: every section on what happened passes')
        or diag($out);
    unlike($first // '', qr/^not ok/m, 'spec 1: ... and nothing else of the block fails') or diag($out);
    cmp_ok(scalar @t1, '>=', 12, 'spec 1: ... a test per cell, the count and the bytes');
    unlike($out, qr/TEST 1: .*check died/, 'spec 1: ... and the block\'s own --- check runs after them');
    is($res{'the upstream saw 2 request(s)'} // '', 'ok', 'spec: the mock was scripted by --- mock');
    like($out, qr/^not ok \d+ - upstream request 1: status 201$/m, 'spec 2: a wrong cell fails');
    like($out, qr/^not ok \d+ - the upstream saw 2 request\(s\)$/m, 'spec 2: a row too many fails');
    like($out, qr/^ok \d+ - upstream: each of the 1 requests had another path$/m, 'spec 2: distinct ran');
    like($out, qr/TEST 2: .*--- check died: --- verbatim: the mock saw no request 2/,
         'spec 2: a verbatim of a request the mock never saw fails');
    like($out, qr/^not ok \d+ - nothing went upstream$/m, 'spec 3: none fails when one went up');
    for my $f (qw(gt like null true string)) {
        like($out, qr/^not ok \d+ - spec $f$/m, "spec 4: the $f form fails on a wrong value");
    }
    like($out, qr/^ok \d+ - spec equal$/m, 'spec 4: ... and passes on the right one');
}

# nested run: the harness must fail these blocks, each for its reason
{
    my ($rc, $out, $err) = nested_run(meta_blocks(), '');
    isnt($rc, 0, 'nested run exits non-zero');
    my %res;    # "TEST n" => [[ok|not ok, description]...]
    while ($out =~ /^(ok|not ok) \d+ - \S+ (TEST \d+): (.*)$/mg) { push @{ $res{$2} }, [$1, $3] }
    my $all_ok = sub { my $t = shift; $res{$t} && !grep { $_->[0] ne 'ok' } @{ $res{$t} } };
    my $failed = sub { my ($t, $re) = @_; grep { $_->[0] eq 'not ok' && $_->[1] =~ $re } @{ $res{$t} || [] } };
    ok($all_ok->('TEST 1'), 'meta 1: a correct block passes');
    ok($failed->('TEST 2', qr/status code ok/), 'meta 2: wrong status fails');
    ok($failed->('TEST 3', qr/no unexpected alert/), 'meta 3: unlisted [crit] fails the block');
    like($err, qr/\[crit\].*tb-meta-nonexistent/, 'meta 3: ... and the [crit] line is shown');
    ok($all_ok->('TEST 4'), 'meta 4: the same [crit] listed in error_log passes');
    ok($failed->('TEST 5', qr/nginx failed to start/), 'meta 5: nginx not starting fails');
    like($err, qr/unknown directive "tb_no_such_directive"/, 'meta 5: ... showing nginx stderr');
    like($err, qr/^#\s+\d+\s+location = \/t \{ tb_no_such_directive; \}/m, 'meta 5: ... and the numbered nginx.conf');
    ok($failed->('TEST 6', qr/must die but it does not/), 'meta 6: must_die while nginx starts fails');
    ok($failed->('TEST 7', qr/request failed: timed out after 0\.3s/), 'meta 7: timeout fails');
    ok($failed->('TEST 8', qr/--- check died: boom/), 'meta 8: a dying --- check fails');
    ok($failed->('TEST 9', qr/"tb-meta: not in the log" matches/), 'meta 9: missing error_log line fails');
    ok($failed->('TEST 9', qr/"No such file or directory" does not match/), 'meta 9: present no_error_log line fails');
    ok($failed->('TEST 10', qr/no unexpected alert/), 'meta 10: AddressSanitizer report fails the block');
    is(scalar(() = $out =~ /^ok \d+ # skip .*TEST 11: /mg), 2, 'meta 11: skip_eval skips 2 tests');
    ok($failed->('TEST 12', qr/must be an array/), 'meta 12: scalar expectation with several requests fails');
    ok($failed->('TEST 13', qr/nginx ended with wait status 9/), 'meta 13: nginx killed during a block fails');
    ok($all_ok->('TEST 14'), 'meta 14: master_off, user_files, several requests pass');
    ok($failed->('TEST 15', qr/--- init died: init boom/), 'meta 15: a dying --- init fails');
    ok($failed->('TEST 16', qr/"tb-meta: other text" matches/), 'meta 16: must_die with a wrong error_log fails');
    like($err, qr/the block's nginx stderr.*\n.*unknown directive "tb_meta_directive"/, 'meta 16: ... showing what nginx printed');
    ok($failed->('TEST 17', qr/unsupported section\(s\) --- grep_error_log grep_error_log_out/),
       'meta 17: a section the harness does not implement fails instead of being ignored');
    ok(!TB::Nginx::listening($meta_port), 'nested run left no nginx listening');
    diag("nested run output:\n$out\n$err") unless Test::More->builder->is_passing;
}

sub meta_blocks { <<'_EOM_' }
=== TEST 1: passes
--- config
    location = /t { return 200 "ok\n"; }
--- request
GET /t
--- response_body
ok

=== TEST 2: wrong status
--- config
    location = /t { return 404; }
--- request
GET /t

=== TEST 3: unlisted crit
--- config
    location = /t { proxy_pass http://unix:/tb-meta-nonexistent.sock:/; }
--- request
GET /t
--- error_code: 502

=== TEST 4: listed crit
--- config
    location = /t { proxy_pass http://unix:/tb-meta-nonexistent.sock:/; }
--- request
GET /t
--- error_code: 502
--- error_log
connect() to unix:/tb-meta-nonexistent.sock failed

=== TEST 5: nginx fails to start
--- config
    location = /t { tb_no_such_directive; }
--- request
GET /t

=== TEST 6: must_die but nginx starts
--- config
    location = /t { return 200; }
--- must_die

=== TEST 7: timeout
--- config
    location = /t { proxy_pass http://127.0.0.1:$TEST_NGINX_BLACKHOLE_PORT; }
--- request
GET /t
--- timeout: 300ms

=== TEST 8: check dies
--- config
    location = /t { return 200; }
--- request
GET /t
--- check
die "boom\n";

=== TEST 9: error_log missing, no_error_log present
--- config
    location /t { root /tb-meta-nonexistent; }
--- request
GET /t/x
--- error_code: 404
--- error_log
tb-meta: not in the log
--- no_error_log
No such file or directory

=== TEST 10: sanitizer report
--- config
    location = /t { return 200; }
--- request
GET /t
--- check
open my $fh, '>>', servroot() . '/logs/error.log' or die;
print $fh "==1==ERROR: AddressSanitizer: heap-use-after-free on address 0x602000000010\n";
close $fh;

=== TEST 11: skip_eval
--- skip_eval: 2: 1
--- config
    location = /t { return 200; }
--- request
GET /t

=== TEST 12: several requests, scalar expectation
--- config
    location = /t { return 200 "x"; }
--- request eval
["GET /t", "GET /t"]
--- response_body
x

=== TEST 13: nginx killed during the block
--- config
    location = /t { return 200; }
--- request
GET /t
--- check
kill 'KILL', nginx_pid();

=== TEST 14: master off: user_files, several requests
--- config
    location /f/ { alias $TEST_NGINX_HTML_DIR/; }
--- user_files
>>> a.txt
A $TEST_NGINX_SERVER_PORT
--- request eval
["GET /f/a.txt", "GET /f/none"]
--- error_code eval
[200, 404]
--- response_body_like eval
[qr/^A \d+$/, "404 Not Found"]
--- error_log
No such file or directory
--- check
is(scalar(worker_pids()), 1, 'single process');
is_deeply([worker_pids()], [nginx_pid()], 'worker_pids() is the nginx process itself');

=== TEST 15: init dies
--- config
    location = /t { return 200; }
--- init
die "init boom\n";
--- request
GET /t

=== TEST 16: must_die, wrong error_log
--- config
    location = /t { tb_meta_directive; }
--- must_die
--- error_log
tb-meta: other text

=== TEST 17: unsupported section
--- config
    location = /t { return 200; }
--- request
GET /t
--- grep_error_log: foo
--- grep_error_log_out
foo
_EOM_

# TEST_NGINX_LOAD_MODULES: one load_module line per path, relative paths made absolute
{
    my ($rc, $out, $err, $tmp) = nested_run(<<'_EOM_', '', TEST_NGINX_LOAD_MODULES => ' tb_a.so  /nonexistent/tb_b.so ');
=== TEST 1: load_module lines
--- must_die
--- error_log eval
qr{dlopen\(\) "\Q${\ Cwd::getcwd()}\E/tb_a\.so" failed}
_EOM_
    is($rc, 0, 'TEST_NGINX_LOAD_MODULES: nginx loads the (relative, made absolute) module path first')
        or diag("$out\n$err");
    open my $in, '<', "$tmp/servroot/conf/nginx.conf" or die;
    my @lines = grep { /^load_module / } <$in>;
    is_deeply(\@lines, ["load_module " . getcwd() . "/tb_a.so;\n", "load_module /nonexistent/tb_b.so;\n"],
              '... one load_module line per path');
}

# repeat_each(2): the requests and checks run twice on the same nginx; --- wait is honoured
{
    my ($rc, $out, $err) = nested_run(<<'_EOM_', 'repeat_each(2);');
=== TEST 1: repeated
--- config
    location /t { root /tb-meta-nonexistent; }
--- request
GET /t/x
--- error_code: 404
--- wait: 10ms
--- error_log
No such file or directory
--- check
our $N++; our %Pids; $Pids{nginx_pid()}++;
is(scalar keys %Pids, 1, "same nginx on run $N");
_EOM_
    is($rc, 0, 'repeat_each run passes') or diag("$out\n$err");
    is(scalar(() = $out =~ /^ok \d+ - .*status code ok$/mg), 2, 'repeat_each(2): two rounds of checks');
    like($out, qr/same nginx on run 2/, '... on one nginx');
}

__DATA__

=== TEST 1: return; response_headers, raw headers, repeated headers
--- config
    location = /t { add_header X-Multi a; add_header X-Multi b; return 200 "hello\n"; }
--- request
GET /t
--- response_body
hello
--- response_headers
Content-Type: text/plain
Content-Length: 6
X-Absent:
!X-Also-Absent
--- raw_response_headers_like: ^HTTP/1\.1 200 OK\r\n.*X-Multi: a\r\nX-Multi: b\r\n$
--- raw_response_headers_unlike: Transfer-Encoding
--- no_error_log
[error]
--- check
is($resp->{headers}{'x-multi'}, 'a, b', 'repeated header joined with ", "');
is_deeply([map { $_->[1] } grep { $_->[0] eq 'X-Multi' } @{ $resp->{header_list} }], [qw(a b)],
          'header_list keeps each header');
is(scalar @responses, 1, 'one response');

=== TEST 2: request body and more_headers, proxy_pass to a second location
--- config
    location = /echo {
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/inner;
        proxy_set_header X-Body $request_body;
    }
    location = /inner {
        return 200 "len=$http_content_length body=$http_x_body foo=$http_x_foo $request_method\n";
    }
--- request
POST /echo
  {"model":"m"}
--- more_headers
# a comment line
X-Foo: bar baz
--- response_body
len=13 body={"model":"m"} foo=bar baz POST

=== TEST 3: chunked response is de-chunked, the raw bytes are kept
--- config
    location = /c { sub_filter 'world' 'chunky'; sub_filter_types *; return 200 "hello world\n"; }
--- request
GET /c
--- response_body
hello chunky
--- response_headers_like
Transfer-Encoding: chunk\w+
Content-Type: text/.*
--- check
like($resp->{raw}, qr/\r\n\r\n[0-9a-fA-F]+\r\nhello chunky\n\r\n0\r\n\r\n\z/, 'raw keeps the chunk framing');

=== TEST 4: several requests: arrays for headers and expectations, HEAD
--- config
    location = /a { return 200 "a $http_x_n\n"; }
    location = /b { return 404; }
--- request eval
["GET /a", "GET /b", "HEAD /a"]
--- more_headers eval
["X-N: 1", "X-N: 2", "X-N: 3"]
--- error_code eval
[200, 404, 200]
--- response_body eval
["a 1\n", qr/404 Not Found/, ""]
--- check
is(scalar @responses, 3, 'three responses in @responses');
is(scalar(worker_pids()), 2, 'worker_pids() in scalar context: the number of workers');
is($responses[2]{headers}{'content-length'}, 4, 'HEAD: length announced, no body read');
is($resp, $responses[-1], '$resp is the last response');

=== TEST 5: user_files: $TEST_NGINX_* expanded, ${...} left alone, readable by the workers
--- config
    location /f/ { alias $TEST_NGINX_HTML_DIR/; }
--- user_files
>>> sub/a.yaml
port: $TEST_NGINX_SERVER_PORT
literal: ${TEST_NGINX_SERVER_PORT}
>>> b.txt
B
--- request
GET /f/sub/a.yaml
--- response_body_like chomp
^port: \d+\nliteral: \$\{TEST_NGINX_SERVER_PORT\}\n$
--- check
is($resp->{body}, 'port: ' . server_port() . "\nliteral: \${TEST_NGINX_SERVER_PORT}\n", 'exact expansion');
is(http_request(path => '/f/b.txt')->{body}, "B\n", 'second user file');
my @w = worker_pids();
is(scalar @w, 2, 'two workers');
for my $pid (@w) {
    open my $st, '<', "/proc/$pid/status" or die;
    my ($uid) = join('', <$st>) =~ /^Uid:\s+(\d+)/m;
    isnt($uid, 0, "worker $pid does not run as root (uid $uid), yet read the files");
}

=== TEST 6: error_log and no_error_log: lines, eval with qr// and strings
--- config
    location /missing { root $TEST_NGINX_HTML_DIR; }
--- request
GET /missing/nofile
--- error_code: 404
--- error_log eval
[qr{open\(\) "[^"]+/missing/nofile" failed \(2: No such file or directory\)}, "[error]"]
--- no_error_log
[warn]
[crit]

=== TEST 7: init, check and the helpers
--- config
    location = /json { default_type application/json; return 200 '{"b":[1,2],"a":"x"}'; }
    location = /len { proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/lenr; }
    location = /lenr { return 200 "$http_content_length $http_x_a"; }
--- init
our $InitRan = defined nginx_pid();
--- request
GET /json
--- response_headers
Content-Type: application/json
--- check
ok($InitRan, '--- init ran with nginx up');
is_deeply(json_decode($resp->{body}), { a => 'x', b => [1, 2] }, 'json_decode');
is(json_encode({ b => 1, a => [2] }), '{"a":[2],"b":1}', 'json_encode is canonical');
is(sha256_hex('abc'), 'ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad', 'sha256_hex');
my $r = http_request(method => 'POST', path => '/len', body => 'x' x 1000, headers => [['X-A', 'v']]);
is("$r->{status} $r->{body}", '200 1000 v', 'http_request: body with Content-Length, headers as arrayref');
$r = http_request(method => 'POST', path => '/len', body => '', headers => { 'X-A' => 'h' });
is($r->{body}, '0 h', 'empty body sends Content-Length: 0; headers as hashref');
$r = http_request(path => '/json', headers => [['Connection', 'keep-alive']], timeout => 2);
is($r->{status}, 200, 'keep-alive request returns once the response is complete');
$r = http_request(port => 1, path => '/');
ok(!defined $r->{status} && $r->{body} eq '' && $r->{error} =~ /connect/, "connection refused: $r->{error}");
is(TB::Nginx::parse_time('250ms'), 0.25, 'timeout with ms suffix');
like(error_log_since_block_start(), qr/\[notice\].*start worker process/, 'error_log_since_block_start');

=== TEST 8: a client that goes away; wait_idle lets the log catch up before the checks
--- config
    location = /bh { proxy_pass http://127.0.0.1:$TEST_NGINX_BLACKHOLE_PORT; }
    location = /big { return 200 "0123456789abcdefghijklmnopqrstuvwxyz"; }
--- check
is(http_request_abort(path => '/bh', after => 0), '', 'after => 0: nothing read');
my $got = http_request_abort(path => '/big', after => 10);
is(length $got, 10, 'after => 10: read exactly 10 bytes');
like($got, qr/^HTTP\/1\.1 /, '... of the response');
my $r = http_request(path => '/bh', timeout => '200ms');
ok($r->{timed_out} && !defined $r->{status}, "a hanging request times out: $r->{error}");
ok(wait_idle(), 'nginx idle again');
--- error_log
client prematurely closed connection

=== TEST 9: 300 concurrent requests, and large bodies multiplexed
--- config
    location = /c { return 200 "$arg_i $connections_active\n"; }
    location = /len { proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/lenr; }
    location = /lenr { return 200 "$http_content_length"; }
--- check
my $rs = http_requests_concurrent([map { { path => "/c?i=$_" } } 1 .. 300]);
is(scalar @$rs, 300, '300 responses');
is(scalar(grep { ($_->{status} // 0) == 200 } @$rs), 300, 'all 200');
is_deeply([map { ($_->{body} =~ /^(\d+) /)[0] } @$rs], [1 .. 300], 'responses in request order');
my $peak = max(map { ($_->{body} =~ / (\d+)$/)[0] // 0 } @$rs);
cmp_ok($peak, '>=', 100, "requests were open at the same time (peak active connections $peak)");
$rs = http_requests_concurrent([map { { method => 'POST', path => '/len', body => 'b' x 300_000 } } 1 .. 8]);
is_deeply([map { "$_->{status} $_->{body}" } @$rs], [('200 300000') x 8], '8 x 300 KB bodies sent concurrently');
--- no_error_log
[error]

=== TEST 10: nginx_reload: a new worker generation serving the new configuration
--- config
    location = /v { return 200 "v1\n"; }
--- request
GET /v
--- response_body
v1
--- check
my @old = worker_pids();
my $conf = servroot() . '/conf/nginx.conf';
open my $in, '<', $conf or die; my $c = do { local $/; <$in> }; close $in;
$c =~ s/"v1\\n"/"v2\\n"/ or die "no v1 in $conf";
open my $out, '>', $conf or die; print $out $c; close $out;
ok(nginx_reload(), 'nginx_reload returns true');
my @new = worker_pids();
is(scalar @new, 2, 'two new workers');
ok(!(grep { my $o = $_; grep { $_ == $o } @new } @old), 'every old worker replaced');
ok(!(grep { kill 0, $_ } @old), 'old workers gone');
is(http_request(path => '/v')->{body}, "v2\n", 'the new configuration serves');
--- error_log
reconfiguring

=== TEST 11: a rejected reload returns false; the old workers keep serving
--- config
    location = /v { return 200 "v1\n"; }
--- check
my @old = worker_pids();
my $conf = servroot() . '/conf/nginx.conf';
open my $out, '>>', $conf or die; print $out "tb_broken_directive;\n"; close $out;
ok(!nginx_reload(timeout => 5, quiet => 1), 'nginx_reload returns false');
is_deeply([worker_pids()], \@old, 'same workers');
is(http_request(path => '/v')->{body}, "v1\n", 'old configuration still serves');
--- error_log
[emerg]
unknown directive "tb_broken_directive"

=== TEST 12: a worker killed by a signal is logged by the master; listed, so excused
--- config
    location = /t { return 200; }
--- request
GET /t
--- check
my @w = worker_pids();
kill 'KILL', $w[0];
ok(poll_until(5, sub { error_log_since_block_start(wait => 0) =~ /exited on signal 9/ }),
   'master logged the killed worker');
ok(poll_until(5, sub { my @n = worker_pids(); @n == 2 && !grep { $_ == $w[0] } @n }), 'worker respawned');
--- error_log
exited on signal 9

=== TEST 13: must_die: a broken directive
--- config
    location = /x { tb_no_such_directive on; }
--- must_die
--- error_log
unknown directive "tb_no_such_directive"
--- no_error_log
[crit]

=== TEST 14: must_die with an exit code; main_config
--- main_config
worker_rlimit_nofile not_a_number;
--- config
    location = /x { return 200; }
--- must_die: 1
--- error_log eval
qr/invalid number|invalid value/

=== TEST 15: main_config and http_config land where they should
--- main_config
worker_rlimit_nofile 4096;
--- http_config
    map $uri $tb_mapped { default "mapped"; }
--- config
    location = /m { return 200 "$tb_mapped\n"; }
--- request
GET /m
--- response_body
mapped

=== TEST 16: response_body_unlike, error_code_like, HTTP/1.0 request line
--- config
    location = /t { return 201 "created\n"; }
--- request
GET /t HTTP/1.0
--- error_code_like: ^20\d$
--- response_body_unlike: error
--- raw_response_headers_like: ^HTTP/1\.1 201

=== TEST 17: timeout section in ms and the default root location
--- request
GET /
--- timeout: 2000ms
--- response_body_like: It works!

=== TEST 18: eval filter on request builds a large body; chomp filter
--- config
    location = /len { proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/lenr; }
    location = /lenr { return 200 "$http_content_length"; }
--- request eval
"POST /len\n" . ("z" x 100000)
--- response_body chomp
100000

=== TEST 19: package variables set in --- init are visible in --- check
--- config
    location = /t { return 200; }
--- init
our $Marker = 1;
--- request
GET /t
--- check
ok($Marker, 'init variables visible in check');

=== TEST 20: mock: plain and TLS listeners through nginx, right and wrong CA
--- skip_eval: 6: !$::have_mock
--- config
    location = /plain { proxy_pass http://127.0.0.1:$TEST_NGINX_MOCK_PORT2/_mock/stats; }
    location = /tls {
        proxy_pass https://127.0.0.1:$TEST_NGINX_MOCK_TLS_PORT/_mock/stats;
        proxy_ssl_verify on; proxy_ssl_trusted_certificate $TEST_NGINX_CA;
        proxy_ssl_name localhost; proxy_ssl_server_name on;
    }
    location = /wrong {
        proxy_pass https://127.0.0.1:$TEST_NGINX_MOCK_TLS_PORT/_mock/stats;
        proxy_ssl_verify on; proxy_ssl_trusted_certificate $TEST_NGINX_WRONG_CA;
        proxy_ssl_name localhost;
    }
--- request eval
["GET /plain", "GET /tls", "GET /wrong"]
--- error_code eval
[200, 200, 502]
--- error_log
upstream SSL certificate verify error

=== TEST 21: mock: upstream requests are logged; the log is reset before each block
--- skip_eval: 9: !$::have_mock
--- config
    location /v1/ { proxy_pass http://127.0.0.1:$TEST_NGINX_MOCK_PORT; }
--- init
is(scalar @{ mock_log() }, 0, 'mock log empty at block start');
--- request
POST /v1/messages
{"model":"claude-sonnet-4-6","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}
--- more_headers
x-api-key: tb-key-1
content-type: application/json
anthropic-version: 2023-06-01
--- response_body_like: "type":\s*"message"
--- check
my $log = mock_log();
is(scalar @$log, 1, 'one upstream request logged');
is($log->[0]{credential}, 'tb-key-1', 'credential');
is($log->[0]{path}, '/v1/messages', 'path');
is($log->[0]{body_sha256}, sha256_hex('{"model":"claude-sonnet-4-6","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}'),
   'body reached the mock intact');
is(ref mock_stats(), 'HASH', 'mock_stats');
is(ref mock_config({}), 'HASH', 'mock_config');
