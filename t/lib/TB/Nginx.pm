package TB::Nginx;

=head1 NAME

TB::Nginx - a small Test::Nginx::Socket-compatible harness (Test::Base + core Perl)

=head1 SYNOPSIS

    use lib 't/lib';
    use TB::Nginx;          # exports Test::Base/Test::More functions + the helpers below
    master_on(); workers(2);        # optional (default: master_process off, 1 worker)
    mock_start();                   # optional: the mock upstream for this file
    run_tests();
    __DATA__
    === TEST 1: name
    --- config
        location /t { return 200 "ok\n"; }
    --- request
    GET /t
    --- response_body
    ok

A .t file written for this harness also runs under a real Test::Nginx::Socket with only its
C<use> line changed; the project sections (C<--- check>) are ignored there.

=head1 PER-BLOCK RUN

Wipe and recreate C<$servroot> (C<$TEST_NGINX_SERVROOT> or C<t/servroot>; temp paths inside it,
dirs 0755 for workers running as nobody), write C<conf/nginx.conf> and the user files, start
C<nginx -p $servroot/ -c conf/nginx.conf> (C<daemon off>, forked, stdout+stderr to
C<logs/stderr.log>), wait until the pid file names it and its port is in LISTEN state (read from
/proc/net/tcp: a probing connect would log "client closed connection") and, with C<master_on>,
all workers run; C<--- init>; the requests and their checks; C<--- check>; C<wait_idle()>; the
log checks; stop (QUIT, TERM after 5 s, then KILL) and wait for every worker to be gone. The
block's logs are nginx's stderr + error.log from its start. nginx.conf also holds a
C<stub_status> server on C<logs/tb-status.sock> (unix socket) used only by C<wait_idle>.
Blocks are shuffled as in Test::Nginx unless C<no_shuffle()> or C<$TEST_NGINX_NO_SHUFFLE>.

A block also fails (one extra test) when nginx died by itself or ended with a non-zero status,
and when its logs, shutdown included, have C<[alert]>, C<[emerg]>, C<[crit]>, C<exited on signal>,
C<AddressSanitizer>, C<LeakSanitizer> or C<runtime error:> on a line that no C<error_log> /
C<no_error_log> pattern matches (not for C<must_die>). A section this harness does not
implement fails the block instead of being ignored.

=head1 SECTIONS

As in Test::Nginx::Socket: C<main_config http_config config user_files request more_headers
error_code error_code_like response_body response_body_like response_body_unlike
response_headers response_headers_like raw_response_headers_like raw_response_headers_unlike
error_log no_error_log timeout must_die skip_eval wait init log_level>; markers C<ONLY SKIP LAST>
and filters (C<eval chomp ...>) from Test::Base. With an arrayref C<--- request> the
per-response sections must be arrayrefs too. C<$TEST_NGINX_*> is expanded in all sections but
the Perl ones (C<init check skip_eval>); C<${TEST_NGINX_X}> is left for nginx/the module.
Project extension: C<--- check>, Perl run after the requests in the suite's own package (the one
that called C<run_tests>, so it sees what the suite imported and its C<our> variables) with
C<@responses>, C<$resp> (the last) and C<$block>; a C<die> is a failure; C<--- init> likewise,
before the requests. C<add_block_preprocessor(sub { my $block = shift; ... })>, as in Test::Nginx,
runs on every block before it runs (C<$block-E<gt>set_value(section =E<gt> ...)> fills in what a
block leaves out); C<declare_sections(names)> makes the sections a preprocessor gives a meaning to
known (TB::Spec's declarative sections: see t/lib/TB/Spec.pm). C<--- x eval> sections are evaluated in the suite's package as well. C<error_log>/C<no_error_log> are
checked once per block, after all requests.

=head1 HELPERS

C<http_request(method path headers body timeout port host version raw)> returns
C<{status, headers (lc name =E<gt> "v1, v2"), header_list, body (de-chunked), raw, raw_headers,
error, timed_out}> (status undef and body '' when the connection failed or timed out);
C<http_requests_concurrent(\@args)> (all connected, then written and read multiplexed);
C<http_request_abort(%args, after =E<gt> N)> returns the at most N bytes read.
C<mock_start(config =E<gt> {...})> starts t/mock/mock.py (ports C<$TEST_NGINX_MOCK_PORT>,
C<_PORT2.._PORT4>, TLS C<$TEST_NGINX_MOCK_TLS_PORT>; CA in C<$servroot/../tb-ca/>, exported as
C<$TEST_NGINX_CA>, C<$TEST_NGINX_WRONG_CA>, C<$TEST_NGINX_MOCK_CERT>, C<$TEST_NGINX_MOCK_KEY>);
C<mock_stop mock_log([since]) mock_reset mock_config(\%) mock_stats>; the mock is reset before
each block. C<nginx_reload(timeout =E<gt> s, quiet =E<gt> 1)> (true once a new worker
generation serves; false at once on C<[emerg]>), C<nginx_pid>, C<worker_pids> (count in scalar
context), C<wait_idle([secs])>, C<error_log_since_block_start(wait =E<gt> 0)>,
C<write_user_file($name, $text)>, C<poll_until($secs, sub {...})>, C<servroot server_root html_dir
server_port json_decode json_encode sha256_hex>. Settings: C<master_on master_off workers
log_level timeout no_shuffle no_root_location repeat_each>.

=cut

use strict;
use warnings;
use Test::Base;                 # block parser; imports Test::More's functions into us
use Test::More import => [qw(note explain BAIL_OUT)];
use Exporter ();
use IO::Socket::INET ();
use IO::Socket::UNIX ();
use IO::Select ();
use POSIX qw(WNOHANG EAGAIN EINTR EWOULDBLOCK);
use Time::HiRes qw(time sleep);
use File::Path qw(make_path remove_tree);
use File::Spec ();
use File::Basename qw(dirname);
use List::Util qw(min max shuffle);
use JSON::PP ();
use HTTP::Tiny ();
use Digest::SHA ();

our @EXPORT = ((grep { !/^\$/ } @Test::Base::EXPORT), qw(note explain BAIL_OUT
    run_tests master_on master_off workers log_level timeout no_shuffle no_root_location
    repeat_each server_port servroot server_root html_dir
    http_request http_requests_concurrent http_request_abort
    mock_start mock_stop mock_log mock_reset mock_config mock_stats
    dns_start dns_stop dns_zone dns_log
    redis_start redis_stop redis_kill redis_cmd redis_port redis_running
    peer_start peer_stop peer_port peer_pid peer_log
    nginx_reload nginx_pid worker_pids wait_idle error_log_since_block_start write_user_file
    poll_until json_decode json_encode sha256_hex request_record add_block_preprocessor
    declare_sections));

sub import {
    strict->import; warnings->import;
    shift;
    Exporter::export(__PACKAGE__, scalar caller, @_);
}

my $OrigPid  = $$;
my $ServRoot = File::Spec->rel2abs($ENV{TEST_NGINX_SERVROOT} || 't/servroot');
my $Aux      = dirname($ServRoot);                          # <servroot>/..: CA, mock files
my $TDir     = dirname(dirname(dirname(File::Spec->rel2abs(__FILE__))));   # .../t
my $Port     = $ENV{TEST_NGINX_SERVER_PORT} || $ENV{TEST_NGINX_PORT} || 1984;
my $Bin      = $ENV{TEST_NGINX_BINARY} || 'nginx';
my $Workers  = 1;
my $Master   = $ENV{TEST_NGINX_MASTER_PROCESS} || 'off';
my $LogLevel = $ENV{TEST_NGINX_LOG_LEVEL} || 'info';
my $Timeout  = $ENV{TEST_NGINX_TIMEOUT} || ($ENV{TEST_NGINX_VALGRIND} ? 60 : 10);
my $NoShuffle = $ENV{TEST_NGINX_NO_SHUFFLE} || 0;
my ($NoRootLocation, $RepeatEach) = (0, 1);
my $StatusSock = "$ServRoot/logs/tb-status.sock";
# TEST_NGINX_VALGRIND=1: nginx runs under memcheck (its reports go to the
# stderr log, which every block scans), with start-up and stop waits to match
my $Valgrind = $ENV{TEST_NGINX_VALGRIND} || 0;
my $StartSecs = $Valgrind ? 90 : 5;
my $CrashRe = qr/\[(?:alert|emerg|crit)\]|exited\ on\ signal|AddressSanitizer|LeakSanitizer|runtime\ error:
    |^==\d+==\ (?:Invalid\ |Conditional\ jump|Use\ of\ uninitialised|Syscall\ param|Mismatched
    |Source\ and\ destination|Process\ terminating|Argument\ ')/x;
my $JSON = JSON::PP->new->utf8->canonical->allow_nonref;
my %Known = map { $_ => 1 } qw(main_config http_config config user_files request more_headers
    error_code error_code_like response_body response_body_like response_body_unlike response_headers
    response_headers_like raw_response_headers_like raw_response_headers_unlike error_log no_error_log
    timeout must_die skip_eval wait init log_level check no_check_leak ONLY SKIP LAST);

my ($NginxPid, $MockPid, $DnsPid, $HaveStatus, $CaDone, @LogOff, $FirstStart);
my ($RedisPid, $PeerPid);
my @Preprocessors;                  # add_block_preprocessor(), as in Test::Nginx
my $CodePkg = 'main';               # where --- init and --- check run

my %Ca = (TEST_NGINX_CA => "$Aux/tb-ca/ca.pem", TEST_NGINX_WRONG_CA => "$Aux/tb-ca/wrong-ca.pem",
          TEST_NGINX_MOCK_CERT => "$Aux/tb-ca/server.pem", TEST_NGINX_MOCK_KEY => "$Aux/tb-ca/server.key");
my %Own = (%Ca, TEST_NGINX_SERVER_PORT => $Port, TEST_NGINX_SERVROOT => $ServRoot,
           TEST_NGINX_SERVER_ROOT => $ServRoot, TEST_NGINX_HTML_DIR => "$ServRoot/html");
@ENV{keys %Own} = values %Own;     # derived from the servroot: never inherited
my %Default = (TEST_NGINX_MOCK_PORT => 19101, TEST_NGINX_MOCK_PORT2 => 19102, TEST_NGINX_MOCK_PORT3 => 19103,
    TEST_NGINX_MOCK_PORT4 => 19104, TEST_NGINX_MOCK_TLS_PORT => 19443, TEST_NGINX_DNS_PORT => 19153,
    TEST_NGINX_REDIS_PORT => 19379, TEST_NGINX_PEER_PORT => $Port + 1);
$ENV{$_} //= $Default{$_} for keys %Default;

for my $sig (qw(INT TERM HUP)) {
    $SIG{$sig} = sub { diag("caught SIG$sig, stopping nginx and the mock"); exit 1 }
        if !defined $SIG{$sig} || $SIG{$sig} eq 'DEFAULT';
}
END { if ($$ == $OrigPid) { local $?; peer_stop(); stop_nginx(); mock_stop(); dns_stop(); redis_stop(); } }

# ---------------------------------------------------------------- settings
sub master_on ()  { $Master = 'on' }
sub master_off () { $Master = 'off' }
sub workers (;$)  { $Workers = shift if @_; $Workers }
sub log_level (;$) { $LogLevel = shift if @_; $LogLevel }
sub timeout (;$)  { $Timeout = shift if @_; $Timeout }
sub no_shuffle () { $NoShuffle = 1 }
sub no_root_location () { $NoRootLocation = 1 }
sub repeat_each (;$) { $RepeatEach = shift if @_; $RepeatEach }
sub server_port (;$) { if (@_) { $Port = shift; $ENV{TEST_NGINX_SERVER_PORT} = $Port } $Port }
sub servroot ()    { $ServRoot }
sub server_root () { $ServRoot }
sub html_dir ()    { "$ServRoot/html" }
sub nginx_pid ()   { $NginxPid }

sub json_decode { $JSON->decode($_[0]) }
sub json_encode { $JSON->encode($_[0]) }
sub sha256_hex  { Digest::SHA::sha256_hex($_[0]) }

sub parse_time { my $t = shift; return undef unless defined $t; $t =~ s/\s+//g;
                 $t =~ s/ms$// ? $t / 1000 : do { $t =~ s/s$//; $t } }

sub slurp { my ($f, $off) = @_; open my $fh, '<', $f or return '';
            binmode $fh; seek $fh, $off || 0, 0; local $/; my $d = <$fh>; $d // '' }

sub spew { my ($f, $d, $mode) = @_; open my $fh, '>', $f or die "cannot write $f: $!\n";
           binmode $fh; print $fh $d; close $fh or die "cannot write $f: $!\n";
           chmod $mode // 0644, $f }

# $TEST_NGINX_* expansion (arrayrefs recursively; regexps left alone)
sub expand {
    my $t = shift;
    return [map { expand($_) } @$t] if ref $t eq 'ARRAY';
    return $t if !defined $t || ref $t;
    $t =~ s{\$(TEST_NGINX_\w+)}{
        ensure_ca() if $Ca{$1};
        defined $ENV{$1} ? $ENV{$1} : die "No environment variable \$$1 defined\n";
    }ge;
    $t;
}

# ---------------------------------------------------------------- processes
sub proc_stat {     # (state, ppid) of a pid, or () if gone
    my $s = slurp("/proc/$_[0]/stat");
    $s =~ /^\d+ \(.*\) (\S) (\d+)/s ? ($1, $2) : ();
}
sub alive { my ($st) = proc_stat($_[0]); defined $st && $st ne 'Z' }
sub cmdline { (my $c = slurp("/proc/$_[0]/cmdline")) =~ tr/\0/ /; $c }

sub children_of {
    my $ppid = shift;
    opendir my $d, '/proc' or return ();
    grep { my (undef, $pp) = proc_stat($_); defined $pp && $pp == $ppid } grep { /^\d+$/ } readdir $d;
}

sub worker_pids {     # list of pids; their number in scalar context
    # under valgrind nginx cannot retitle its processes: every child counts
    my @p = !$NginxPid ? () : $Master ne 'on' ? ($NginxPid)
          : sort { $a <=> $b } grep { my $c = cmdline($_);
                slurp("/proc/$_/comm") !~ /^tb-reloader/      # the module's reload helper
                && ($Valgrind || ($c =~ /worker process/ && $c !~ /shutting down/)) }
                children_of($NginxPid);
    wantarray ? @p : scalar @p;
}

sub listening {     # is something in LISTEN state on $port (v4 or v6)?
    my $port = sprintf '%04X', shift;
    for my $f ('/proc/net/tcp', '/proc/net/tcp6') {
        for (split /\n/, slurp($f)) { return 1 if /^\s*\d+: [0-9A-F]+:$port [0-9A-F]+:0000 0A / }
    }
    0;
}

sub poll_until {    # poll $cond (1 ms, doubling up to 20 ms) until true or $secs elapsed
    my ($secs, $cond) = @_;
    my ($end, $d) = (time + $secs, 0.001);
    while (1) {
        my $r = $cond->();
        return $r if $r;
        return undef if time > $end;
        sleep $d; $d = min($d * 2, 0.02);
    }
}

# A request's record enters the inspector when the request ends, which can be
# a moment after its client read the last byte (and the next request may be
# in the other worker): await it, as an operator's script would.
sub request_record {
    my ($res, %h) = @_;
    my $id = ref $res ? $res->{headers}{'x-tokenbiryani-request-id'} : $res;
    die "request_record: the response carries no x-tokenbiryani-request-id\n" unless defined $id;
    my $last;
    my $rec = poll_until(5, sub {
        $last = http_request(method => 'GET', path => "/admin/requests/$id",
                             headers => { 'x-api-key' => 'admin-key', %h });
        ($last->{status} // 0) == 200 ? json_decode($last->{body}) : undef;
    });
    die "/admin/requests/$id: $last->{status} $last->{body}\n" unless $rec;
    $rec;
}

sub reap {          # wait status of our child $pid within $secs, or undef
    my ($pid, $secs) = @_;
    my $st;
    poll_until($secs, sub { my $r = waitpid($pid, WNOHANG); $st = $?; $r == $pid || $r == -1 })
        and return $st;
    undef;
}

sub spawn {         # fork + exec @cmd, stdout+stderr appended to $out
    my ($out, @cmd) = @_;
    my $pid = fork // die "fork: $!\n";
    return $pid if $pid;
    open STDIN, '<', '/dev/null'; open STDOUT, '>>', $out; open STDERR, '>&', \*STDOUT;
    exec @cmd or print STDERR "exec $cmd[0]: $!\n";
    POSIX::_exit(127);
}

sub stop_pid {      # QUIT/TERM, then KILL; returns (wait status or undef, how)
    my ($pid, $sig, $secs) = @_;
    kill $sig, $pid;
    my $st = reap($pid, $secs);
    return ($st, $sig) if defined $st;
    kill 'TERM', $pid; $st = reap($pid, 2);
    return ($st, 'TERM') if defined $st;
    kill 'KILL', $pid; return (reap($pid, 5), 'KILL');
}

sub kill_stale {    # a nginx / mock left by an earlier, interrupted run of this harness
    my ($pidfile, $re) = @_;
    my ($pid) = slurp($pidfile) =~ /(\d+)/ or return;
    return unless alive($pid) && cmdline($pid) =~ $re;
    diag("stopping stale process $pid from $pidfile");
    kill 'TERM', $pid;
    poll_until(5, sub { !alive($pid) }) or kill 'KILL', $pid;
}

sub start_nginx {   # returns (1) when serving, or (0, wait status or undef, reason)
    return (0, undef, "port $Port is already in use") if listening($Port);
    my @vg = !$Valgrind ? () : ('valgrind', '-q', '--tool=memcheck', '--leak-check=no',
        '--track-origins=yes', '--num-callers=30',
        "--suppressions=$TDir/valgrind.supp");
    $NginxPid = spawn("$ServRoot/logs/stderr.log", @vg, $Bin, '-p', "$ServRoot/", '-c', 'conf/nginx.conf');
    my ($st, $exited);
    my $ok = poll_until($StartSecs, sub {
        my $r = waitpid($NginxPid, WNOHANG);
        if ($r == $NginxPid) { ($st, $exited) = ($?, 1); return 1 }
        my ($p) = slurp("$ServRoot/logs/nginx.pid") =~ /(\d+)/;
        my @w = $Master eq 'on' ? worker_pids() : ();
        $p && $p == $NginxPid && listening($Port) && ($Master ne 'on' || @w >= $Workers);
    });
    if ($exited) { undef $NginxPid; return (0, $st, 'nginx exited') }
    return (1) if $ok;
    stop_nginx();
    (0, undef, "nginx did not come up within $StartSecs s");
}

sub stop_nginx {    # returns (wait status, how) or () if nginx was not running
    return () unless $NginxPid;
    my @workers = $Master eq 'on' ? children_of($NginxPid) : ();
    my ($st, $how) = stop_pid($NginxPid, 'QUIT', $Valgrind ? 60 : 5);
    poll_until($Valgrind ? 60 : 5, sub { !grep { alive($_) } @workers }) or kill 'KILL', grep { alive($_) } @workers;
    undef $NginxPid;
    ($st, $how);
}

# ---------------------------------------------------------------- files
sub setup_servroot {
    kill_stale("$ServRoot/logs/nginx.pid", qr/nginx/) unless $FirstStart++;
    if (-e $ServRoot) {
        die "refusing to wipe $ServRoot (no 'servroot' in its name, no .tb-servroot in it)\n"
            unless $ServRoot =~ /servroot/ || -e "$ServRoot/.tb-servroot";
        remove_tree($ServRoot, { error => \my $err });
        die "cannot wipe $ServRoot: " . join(', ', map { values %$_ } @$err) . "\n" if @$err;
    }
    make_path(map { "$ServRoot/$_" } qw(conf logs html));
    chmod 0755, $ServRoot, map { "$ServRoot/$_" } qw(conf logs html);
    spew("$ServRoot/.tb-servroot", '');
    spew("$ServRoot/html/index.html", "<html><head><title>It works!</title></head><body>It works!</body></html>");
}

sub write_user_file {
    my ($name, $body) = @_;
    my $path = $name =~ m{^/} ? $name : "$ServRoot/html/$name";
    my $dir = dirname($path);
    if (!-d $dir) { make_path($dir); my $d = $dir;     # readable by workers running as nobody
                    while (index($d, "$ServRoot/") == 0) { chmod 0755, $d; $d = dirname($d) } }
    spew($path, expand($body // ''));
    $path;
}

sub write_user_files {
    my $files = shift // return;
    if (!ref $files) {
        my ($cur, @list);
        for (split /^/, $files) {
            if (/^>>> (\S+)/) { push @list, $cur = [$1, ''] }
            elsif ($cur) { $cur->[1] .= $_ }
        }
        $files = \@list;
    }
    write_user_file(@$_) for @$files;
}

sub nginx_has { our $V //= `$Bin -V 2>&1` // ''; index($V, $_[0]) >= 0 }

sub write_conf {
    my ($b) = @_;
    my ($main, $http, $conf) = map { expand($b->$_ // '') } qw(main_config http_config config);
    my $level = $b->log_level // $LogLevel; chomp $level;
    my $mods = join '', map { 'load_module ' . File::Spec->rel2abs($_) . ";\n" } grep { length }
               split /\s+/, $ENV{TEST_NGINX_LOAD_MODULES} // '';
    my $temps = join '', map { "    ${_}_temp_path $ServRoot/${_}_temp;\n" }
                qw(client_body proxy fastcgi uwsgi scgi);
    my $root = $NoRootLocation ? '' : "        location / { root $ServRoot/html; index index.html index.htm; }\n";
    $HaveStatus = nginx_has('http_stub_status_module');
    my $status = !$HaveStatus ? '' : <<"_EOS_";
    server {    # TB::Nginx: in-flight request counter for wait_idle(), not part of the test
        listen unix:$StatusSock;
        access_log off;
        location / { stub_status; }
    }
_EOS_
    my $env = join '', map { "env $_;\n" } qw(ASAN_OPTIONS LSAN_OPTIONS UBSAN_OPTIONS LD_PRELOAD LD_LIBRARY_PATH);
    spew("$ServRoot/conf/nginx.conf", <<"_EOC_");
daemon off;
master_process $Master;
worker_processes $Workers;
error_log $ServRoot/logs/error.log $level;
pid $ServRoot/logs/nginx.pid;
$env$mods
$main

events { accept_mutex off; worker_connections 1024; }

http {
    access_log $ServRoot/logs/access.log;
$temps    default_type text/plain;

$http

    server {
        listen 127.0.0.1:$Port;
        server_name localhost;
        client_max_body_size 32m;

$conf
$root    }
$status}
_EOC_
}

sub log_files { ("$ServRoot/logs/stderr.log", "$ServRoot/logs/error.log") }
sub log_mark  { @LogOff = map { -s $_ // 0 } log_files() }
sub log_text  { my $i = 0; my @off = @_ ? @_ : @LogOff; join '', map { slurp($_, $off[$i++]) } log_files() }

sub error_log_since_block_start {
    my %o = @_;
    wait_idle() unless defined $o{wait} && !$o{wait};
    log_text();
}

# ---------------------------------------------------------------- HTTP client
sub wait_idle {     # until no client request is in flight in nginx (stub_status counters)
    my $secs = shift // ($Valgrind ? 30 : 5);
    return 1 unless $NginxPid;
    if (!$HaveStatus) { our $Warned++ or diag("$Bin lacks stub_status: wait_idle() cannot wait"); return 1 }
    my $last = 'no answer';
    poll_until($secs, sub {
        return 1 unless alive($NginxPid);
        my $s = IO::Socket::UNIX->new(Peer => $StatusSock) or return 0;
        # a worker that dies as it accepts must not take the harness with it
        local $SIG{PIPE} = 'IGNORE';
        print $s "GET / HTTP/1.0\r\n\r\n" or return 0;
        my $sel = IO::Select->new($s); my ($buf, $out) = ('', '');
        while ($sel->can_read(2)) { last unless sysread($s, $buf, 4096); $out .= $buf }
        return 0 unless $out =~ /Reading: (\d+) Writing: (\d+)/;
        $last = "reading $1, writing $2 (1 is this status request)";
        $1 + $2 <= 1;
    }) and return 1;
    diag("wait_idle: nginx still busy after ${secs}s: $last" . (our $CurBlock ? " ($CurBlock)" : ''));
    0;
}

sub _conn {         # one client connection: {sock, wbuf, rbuf, deadline, to_eof, max, ...}
    my %a = @_;
    my $t = parse_time($a{timeout}) // $Timeout;
    my $c = { deadline => time + $t, timeout => $t, rbuf => '', head => 0, max => $a{after} };
    if (defined $a{raw}) {
        $c->{wbuf} = $a{raw}; $c->{to_eof} = 1;
    } else {
        my $method = $a{method} // 'GET';
        my @h = ref $a{headers} eq 'HASH' ? map { [$_, $a{headers}{$_}] } sort keys %{$a{headers}}
              : @{ $a{headers} // [] };
        my %has = map { lc $_->[0] => $_->[1] } @h;
        my $req = "$method " . ($a{path} // '/') . ' ' . ($a{version} // 'HTTP/1.1') . "\r\n";
        $req .= "Host: localhost\r\n" unless exists $has{host};
        $req .= "Connection: close\r\n" unless exists $has{connection};
        $req .= "$_->[0]: $_->[1]\r\n" for @h;
        my $body = $a{body};
        utf8::encode($body) if defined $body && utf8::is_utf8($body);
        $req .= 'Content-Length: ' . length($body) . "\r\n"
            if defined $body && !exists $has{'content-length'} && !exists $has{'transfer-encoding'};
        $c->{wbuf} = "$req\r\n" . ($body // '');
        $c->{head} = $method eq 'HEAD';
        $c->{to_eof} = ($has{connection} // 'close') =~ /close/i || ($a{version} // '') eq 'HTTP/1.0';
    }
    $c->{sock} = IO::Socket::INET->new(PeerAddr => $a{host} // '127.0.0.1',
                                       PeerPort => $a{port} // $Port, Timeout => $t)
        or $c->{error} = "connect to port " . ($a{port} // $Port) . " failed: " . ($@ || $!);
    $c->{sock}->blocking(0) if $c->{sock};
    $c;
}

sub _complete {     # is $buf a whole response (for keep-alive requests)?
    my ($buf, $head) = @_;
    my $i = index($buf, "\r\n\r\n"); return 0 if $i < 0;
    my $hdr = substr($buf, 0, $i); my $body = substr($buf, $i + 4);
    return 1 if $head || $hdr =~ m{^HTTP/\S+ (?:1\d\d|204|304)};
    return $body =~ /(?:^|\r\n)0[ \t;]*[^\r\n]*\r\n(?:[^\r\n]+\r\n)*\r\n\z/ ? 1 : 0
        if $hdr =~ /^transfer-encoding:[ \t]*chunked/mi;
    return length($body) >= $1 if $hdr =~ /^content-length:[ \t]*(\d+)/mi;
    0;
}

sub _run {          # drive connections with select() until each is done
    my @c = grep { $_->{sock} } @_;
    local $SIG{PIPE} = 'IGNORE';
    my ($rs, $ws) = (IO::Select->new, IO::Select->new);
    my %by = map { fileno($_->{sock}) => $_ } @c;
    for (@c) { $rs->add($_->{sock}); $ws->add($_->{sock}) if length $_->{wbuf} }
    my $done = sub { my $c = shift; $rs->remove($c->{sock}); $ws->remove($c->{sock}); close $c->{sock}; $c->{closed} = 1 };
    while ($rs->count) {
        my $now = time;
        for (grep { !$_->{closed} && $_->{deadline} <= $now } @c) {
            $_->{timed_out} = 1; $done->($_);
        }
        last unless $rs->count;
        my $wait = max(0, min(map { $_->{deadline} } grep { !$_->{closed} } @c) - $now);
        my ($r, $w) = IO::Select->select($rs, $ws->count ? $ws : undef, undef, $wait);
        for my $s (@{ $w || [] }) {
            my $c = $by{fileno $s};
            my $n = syswrite($s, $c->{wbuf}, 65536);
            if (defined $n) { substr($c->{wbuf}, 0, $n, '') }
            elsif ($! != EAGAIN && $! != EWOULDBLOCK && $! != EINTR) { $c->{werr} = "write: $!"; $c->{wbuf} = '' }
            $ws->remove($s) unless length $c->{wbuf};
        }
        for my $s (@{ $r || [] }) {
            my $c = $by{fileno $s} or next; next if $c->{closed};
            my $want = $c->{max} ? min(65536, $c->{max} - length $c->{rbuf}) : 65536;
            my $n = $want > 0 ? sysread($s, my $buf, $want) : 0;
            if (!defined $n) { next if $! == EAGAIN || $! == EWOULDBLOCK || $! == EINTR;
                               $c->{rerr} = "read: $!"; $done->($c) }
            elsif ($n == 0) { $done->($c) }
            else {
                $c->{rbuf} .= $buf;
                $done->($c) if ($c->{max} && length $c->{rbuf} >= $c->{max})
                            || (!$c->{to_eof} && _complete($c->{rbuf}, $c->{head}));
            }
        }
    }
}

sub parse_response {
    my ($raw, $head_req) = @_;
    my %r = (status => undef, headers => {}, header_list => [], body => '', raw => $raw, raw_headers => '');
    my $buf = $raw;
    $buf =~ s{^HTTP/\d\.\d 1(?!01)\d\d[^\r\n]*\r\n(?:[^\r\n]+\r\n)*\r\n}{}; # interim 1xx
    my $i = index($buf, "\r\n\r\n");
    if ($i < 0) { $r{error} = length $raw ? 'incomplete response header' : 'empty response'; return \%r }
    $r{raw_headers} = substr($buf, 0, $i + 2);
    my $rest = substr($buf, $i + 4);
    my ($line, @lines) = split /\r\n/, $r{raw_headers};
    ($r{status}) = $line =~ m{^HTTP/\d\.\d\s+(\d{3})\b} or $r{error} = "bad status line: $line";
    for (@lines) {
        my ($k, $v) = /^([^:\s]+)[ \t]*:[ \t]*(.*?)[ \t]*$/ or next;
        push @{ $r{header_list} }, [$k, $v];
        $r{headers}{lc $k} = exists $r{headers}{lc $k} ? "$r{headers}{lc $k}, $v" : $v;
    }
    my $st = $r{status} // 0;
    return \%r if $head_req || $st == 204 || $st == 304 || ($st >= 100 && $st < 200);
    if (($r{headers}{'transfer-encoding'} // '') =~ /chunked/i) {
        my $out = '';
        while (1) {
            if ($rest !~ s/^([0-9a-fA-F]+)[ \t]*(?:;[^\r\n]*)?\r\n//) {
                $r{error} = length $rest ? 'invalid chunk size line' : 'no last chunk (truncated chunked body)';
                last;
            }
            my $n = hex $1;
            if ($n == 0) {
                $r{error} = 'no final CRLF after the last chunk' unless $rest =~ s/^(?:[^\r\n]+\r\n)*\r\n//;
                $r{extra} = $rest if length $rest;
                last;
            }
            if (length($rest) < $n + 2 || substr($rest, $n, 2) ne "\r\n") {
                $r{error} = 'truncated or malformed chunk'; $out .= substr($rest, 0, $n); last;
            }
            $out .= substr($rest, 0, $n, ''); substr($rest, 0, 2, '');
        }
        $r{body} = $out;
    } elsif (defined(my $len = $r{headers}{'content-length'})) {
        $r{error} = "body truncated: $len bytes announced, " . length($rest) . ' received'
            if length $rest < $len;
        $r{body} = substr($rest, 0, $len);
    } else {
        $r{body} = $rest;
    }
    \%r;
}

sub _result {
    my $c = shift;
    if ($c->{error} || $c->{timed_out}) {
        return { status => undef, headers => {}, header_list => [], body => '', raw => $c->{rbuf},
                 raw_headers => '', timed_out => $c->{timed_out},
                 error => $c->{error} // sprintf('timed out after %ss (%d bytes received)',
                                                 $c->{timeout}, length $c->{rbuf}) };
    }
    my $r = parse_response($c->{rbuf}, $c->{head});
    $r->{error} = join '; ', grep { defined } $c->{rerr}, $c->{werr}, $r->{error}
        if $c->{rerr} || ($c->{werr} && !defined $r->{status});
    $r;
}

sub http_request { my $c = _conn(@_); _run($c); _result($c) }

sub http_requests_concurrent {
    my @c = map { _conn(%$_) } @{ $_[0] };
    _run(@c);
    [map { _result($_) } @c];
}

sub http_request_abort {
    my %a = @_;
    my $c = _conn(%a, after => $a{after} // 0);
    if ($c->{sock} && !$c->{max}) {     # after => 0: send, then go away at once
        local $SIG{PIPE} = 'IGNORE';
        $c->{sock}->blocking(1); print { $c->{sock} } $c->{wbuf}; close $c->{sock};
        return '';
    }
    _run($c);
    $c->{rbuf};
}

# ---------------------------------------------------------------- TLS material, mock
sub ensure_ca {
    return if $CaDone++;
    my $dir = "$Aux/tb-ca";
    return if -s "$dir/server.pem" && -s "$dir/wrong-ca.pem" && -M "$dir/server.pem" < 1;
    my $tmp = "$dir.tmp.$$";
    remove_tree($tmp); make_path($tmp);
    my $ec = '-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes';
    my $ca = '-addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign';
    spew("$tmp/ext.cnf", "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n"
                       . "keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n");
    for my $cmd (
        "openssl req -x509 $ec -keyout ca.key -out ca.pem -days 3650 -subj '/CN=TB::Nginx test CA' $ca",
        "openssl req -x509 $ec -keyout wrong-ca.key -out wrong-ca.pem -days 3650 -subj '/CN=TB::Nginx wrong CA' $ca",
        "openssl req $ec -keyout server.key -out server.csr -subj /CN=localhost",
        "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -set_serial 0x" . sprintf('%x', time * 1000)
            . " -days 3650 -extfile ext.cnf -out server.pem") {
        my $out = `cd '$tmp' && $cmd 2>&1`;
        die "TLS test material: '$cmd' failed:\n$out" if $?;
    }
    chmod 0644, glob("$tmp/*"); chmod 0755, $tmp;
    remove_tree($dir); rename $tmp, $dir or die "rename $tmp: $!\n";
}

sub mock_start {
    my %o = @_;
    die "mock_start: the mock is already running (pid $MockPid)\n" if $MockPid;
    my $script = "$TDir/mock/mock.py";
    die "mock_start: $script does not exist\n" unless -f $script;
    ensure_ca(); make_path($Aux);
    my ($ready, $pidf, $errf, $cfgf) = map { "$Aux/mock.$_" } qw(ready pid stderr config.json);
    kill_stale($pidf, qr/mock\.py/);
    unlink $ready, $pidf, $errf;
    spew($cfgf, json_encode($o{config})) if $o{config};
    my @cmd = ('/usr/bin/python3', $script,
        (map { ('--listen', "127.0.0.1:$ENV{$_}") } map { "TEST_NGINX_MOCK_PORT$_" } '', 2, 3, 4),
        (map { ('--listen', $_) } @{ $o{listen} // [] }),
        '--tls-listen', "127.0.0.1:$ENV{TEST_NGINX_MOCK_TLS_PORT}",
        '--cert', $ENV{TEST_NGINX_MOCK_CERT}, '--key', $ENV{TEST_NGINX_MOCK_KEY},
        '--log', "$Aux/mock.log", ($o{config} ? ('--config', $cfgf) : ()),
        '--pidfile', $pidf, '--ready-file', $ready);
    $MockPid = spawn($errf, @cmd);
    my ($exited, $st);
    poll_until(10, sub { return $exited = 1 if waitpid($MockPid, WNOHANG) == $MockPid && defined($st = $?);
                         -s $ready })
        and !$exited and return $MockPid;
    my $why = $exited ? "exited with wait status $st" : 'was not ready within 10 s';
    if (!$exited) { stop_pid($MockPid, 'TERM', 3) }
    undef $MockPid;
    die "mock_start: the mock $why; command: @cmd\n--- its output:\n" . slurp($errf);
}

# ---------------------------------------------------------------- redis
# Debian's redis-server on 127.0.0.1:$TEST_NGINX_REDIS_PORT, its data in
# <servroot>/../redis (append-only, so a stop and start keeps it; fresh =>
# 1 starts it empty), flushed before every block while it runs
sub redis_port { $ENV{TEST_NGINX_REDIS_PORT} }
sub redis_running { $RedisPid && alive($RedisPid) }

sub redis_start {
    my %o = @_;
    die "redis_start: redis is already running (pid $RedisPid)\n" if $RedisPid;
    my $dir = "$Aux/redis";
    kill_stale("$Aux/redis.pid", qr/redis-server/);
    remove_tree($dir) if $o{fresh};
    make_path($dir);
    my @cmd = ('redis-server', '--port', redis_port(), '--bind', '127.0.0.1', '--protected-mode', 'no',
               '--daemonize', 'no', '--pidfile', "$Aux/redis.pid", '--dir', $dir, '--save', '',
               '--appendonly', 'yes', '--appendfsync', 'always', '--logfile', '',
               @{ $o{args} // [] });
    $RedisPid = spawn("$Aux/redis.log", @cmd);
    my $exited;
    poll_until(10, sub { return $exited = 1 if waitpid($RedisPid, WNOHANG) == $RedisPid;
                         listening(redis_port()) && eval { redis_cmd('PING') eq 'PONG' } })
        and !$exited and return $RedisPid;
    stop_pid($RedisPid, 'TERM', 3) unless $exited;
    undef $RedisPid;
    die "redis_start: redis-server did not come up: @cmd\n" . tail(slurp("$Aux/redis.log"), 20) . "\n";
}

sub redis_stop {      # a clean stop (its data kept for the next start)
    return unless $RedisPid;
    stop_pid($RedisPid, 'TERM', 5);
    undef $RedisPid;
}

sub redis_kill {      # as if the machine lost it: SIGKILL, nothing more said
    return unless $RedisPid;
    kill 'KILL', $RedisPid;
    reap($RedisPid, 5);
    undef $RedisPid;
}

sub _resp_read {
    my ($s) = @_;
    my $line = <$s>;
    die "redis: connection closed\n" unless defined $line;
    $line =~ s/\r\n\z//;
    my ($t, $v) = (substr($line, 0, 1), substr($line, 1));
    return $v if $t eq '+';
    return { error => $v } if $t eq '-';
    return 0 + $v if $t eq ':';
    if ($t eq '$') {
        return undef if $v < 0;
        my $buf = '';
        while (length($buf) < $v + 2) {
            my $n = read($s, $buf, $v + 2 - length($buf), length($buf));
            die "redis: connection closed\n" unless $n;
        }
        return substr($buf, 0, $v);
    }
    if ($t eq '*') { return undef if $v < 0; return [map { _resp_read($s) } 1 .. $v] }
    die "redis: unexpected reply '$line'\n";
}

sub redis_cmd {       # one command on a connection of its own: its reply ({error} for an error)
    my @a = @_;
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => redis_port(), Timeout => 5)
        or die "redis: cannot connect to port " . redis_port() . ": $!\n";
    binmode $s;
    local $SIG{PIPE} = 'IGNORE';
    print $s '*' . scalar(@a) . "\r\n" . join('', map { '$' . length($_) . "\r\n$_\r\n" } @a)
        or die "redis: cannot send the command: $!\n";
    my $r = _resp_read($s);
    close $s;
    $r;
}

# ---------------------------------------------------------------- a second nginx
# the block's nginx.conf again, on $TEST_NGINX_PEER_PORT with its own prefix
# (<servroot>/peer: logs, pid, temp paths) and the same files (tb.yaml, keys)
sub peer_port { $ENV{TEST_NGINX_PEER_PORT} }
sub peer_pid { $PeerPid }
sub peer_log { my $d = "$ServRoot/peer/logs"; slurp("$d/stderr.log") . slurp("$d/error.log") }

sub peer_start {
    die "peer_start: the peer is already running (pid $PeerPid)\n" if $PeerPid;
    my $root = "$ServRoot/peer";
    make_path(map { "$root/$_" } qw(conf logs));
    chmod 0755, $root, "$root/conf", "$root/logs";
    my $conf = slurp("$ServRoot/conf/nginx.conf");
    my $port = peer_port();
    $conf =~ s/listen 127\.0\.0\.1:$Port;/listen 127.0.0.1:$port;/g;
    $conf =~ s{\Q$ServRoot\E/(logs|\w+_temp)\b}{$root/$1}g;
    spew("$root/conf/nginx.conf", $conf);
    return (0, "port $port is already in use") if listening($port);
    $PeerPid = spawn("$root/logs/stderr.log", $Bin, '-p', "$root/", '-c', 'conf/nginx.conf');
    my $exited;
    my $ok = poll_until($StartSecs, sub {
        return $exited = 1 if waitpid($PeerPid, WNOHANG) == $PeerPid;
        my ($p) = slurp("$root/logs/nginx.pid") =~ /(\d+)/;
        $p && $p == $PeerPid && listening($port)
            && ($Master ne 'on' || children_of($PeerPid) >= $Workers);
    });
    if ($ok && !$exited) { return 1 }
    my $logs = peer_log();
    peer_stop() unless $exited;
    undef $PeerPid;
    die "peer_start: the second nginx did not come up\n" . tail($logs, 20) . "\n";
}

sub peer_stop {       # (wait status, how) or () if it was not running
    return () unless $PeerPid;
    my @workers = $Master eq 'on' ? children_of($PeerPid) : ();
    my ($st, $how) = stop_pid($PeerPid, 'QUIT', 5);
    poll_until(5, sub { !grep { alive($_) } @workers }) or kill 'KILL', grep { alive($_) } @workers;
    undef $PeerPid;
    ($st, $how);
}

# t/mock/dns.py on 127.0.0.1:$TEST_NGINX_DNS_PORT (UDP), answering from a zone
# the test rewrites with dns_zone(); dns_log() is the questions it was asked
sub dns_zone {
    my $zone = shift;
    my $f = "$Aux/dns.zone.json";
    spew("$f.tmp", json_encode($zone));
    rename "$f.tmp", $f or die "dns_zone: rename: $!\n";
}

sub dns_start {
    my %o = @_;
    die "dns_start: the DNS responder is already running\n" if $DnsPid;
    my ($ready, $pidf, $errf, $log) = map { "$Aux/dns.$_" } qw(ready pid stderr log);
    kill_stale($pidf, qr/dns\.py/);
    unlink $ready, $pidf, $errf, $log;
    dns_zone($o{zone} // { names => {} });
    $DnsPid = spawn($errf, '/usr/bin/python3', "$TDir/mock/dns.py",
                    '--listen', "127.0.0.1:$ENV{TEST_NGINX_DNS_PORT}", '--zone', "$Aux/dns.zone.json",
                    '--log', $log, '--pidfile', $pidf, '--ready-file', $ready);
    poll_until(10, sub { -s $ready }) or die "dns_start: not ready: " . slurp($errf) . "\n";
    $DnsPid;
}

sub dns_stop {
    return unless $DnsPid;
    my $pid = $DnsPid; undef $DnsPid;
    stop_pid($pid, 'TERM', 3);
}

sub dns_log {
    [map { json_decode($_) } grep { /\S/ } split /\n/, slurp("$Aux/dns.log")];
}

sub mock_stop {
    return unless $MockPid;
    my $pid = $MockPid; undef $MockPid;
    stop_pid($pid, 'TERM', 3);
}

sub _mock_call {
    my ($method, $path, $body) = @_;
    my $url = "http://127.0.0.1:$ENV{TEST_NGINX_MOCK_PORT}/_mock/$path";
    my $r = HTTP::Tiny->new(timeout => 10, keep_alive => 0,
                            proxy => undef, http_proxy => undef, https_proxy => undef)->request($method, $url,
        defined $body ? { content => json_encode($body), headers => { 'content-type' => 'application/json' } } : {});
    die "mock $method $url: $r->{status} $r->{reason}: $r->{content}\n" unless $r->{success};
    json_decode($r->{content});
}
sub mock_log    { _mock_call(GET => 'log' . (defined $_[0] ? "?since=$_[0]" : '')) }
sub mock_reset  { _mock_call(POST => 'reset', {}) }
sub mock_config { _mock_call(POST => 'config', $_[0] // {}) }
sub mock_stats  { _mock_call(GET => 'stats') }

# ---------------------------------------------------------------- reload
sub nginx_reload {
    my %o = @_;
    die "nginx_reload: nginx is not running\n" unless $NginxPid;
    die "nginx_reload: needs master_on()\n" unless $Master eq 'on';
    my %old = map { $_ => 1 } worker_pids();
    my $off = -s "$ServRoot/logs/error.log" // 0;
    kill 'HUP', $NginxPid;
    my $failed;
    poll_until($o{timeout} // 10, sub {
        return $failed = 1 if slurp("$ServRoot/logs/error.log", $off) =~ /\[emerg\]/;
        my @new = grep { !$old{$_} } worker_pids();
        !(grep { alive($_) } keys %old) && @new >= $Workers && listening($Port);
    }) and !$failed and return 1;
    $o{quiet} or diag("nginx_reload: " . ($failed ? 'nginx rejected the new configuration' : 'no new worker generation')
         . ":\n" . tail(slurp("$ServRoot/logs/error.log", $off), 20));
    0;
}

# ---------------------------------------------------------------- running blocks
sub tail { my ($t, $n) = @_; my @l = split /\n/, $t; join "\n", @l[max(0, @l - $n) .. $#l] }

sub conf_listing {
    my $i = 0;
    join '', map { sprintf "%4d  %s\n", ++$i, $_ } split /\n/, slurp("$ServRoot/conf/nginx.conf");
}

sub pats {          # error_log / no_error_log value -> list of strings and regexps
    my $v = shift;
    return () unless defined $v;
    return ($v) if ref $v eq 'Regexp';
    return grep { defined && length } @$v if ref $v eq 'ARRAY';
    chomp $v; grep { length } split /\n+/, $v;
}
sub line_matches { my ($line, $p) = @_; ref $p ? $line =~ $p : index($line, $p) >= 0 }

sub check_logs {
    my ($name, $b, $text) = @_;
    my @lines = split /\n/, $text;
    my $missing = 0;
    for my $p (pats(expand($b->error_log))) {
        ok((grep { line_matches($_, $p) } @lines) ? 1 : 0, "$name - pattern \"$p\" matches a line in error.log")
            or $missing++;
    }
    diag("--- the block's nginx stderr + error.log (last 25 lines):\n" . tail($text, 25)) if $missing;
    for my $p (pats(expand($b->no_error_log))) {
        my ($hit) = grep { line_matches($_, $p) } @lines;
        ok(!defined $hit, "$name - pattern \"$p\" does not match a line in error.log")
            or diag("matching line: $hit");
    }
}

sub crash_check {
    my ($name, $b, $text) = @_;
    my @ok = (pats(expand($b->error_log)), pats(expand($b->no_error_log)));
    my @bad = grep { my $l = $_; $l =~ $CrashRe && !grep { line_matches($l, $_) } @ok } split /\n/, $text;
    ok(!@bad, "$name - no unexpected alert/emerg/crit/crash/sanitizer report in the logs")
        or diag(join "\n", @bad[0 .. min($#bad, 29)]);
}

sub run_code {      # run --- init / --- check code in the suite's package; the error or undef
    my ($code, $what, $block, @responses) = @_;
    my $resp = $responses[-1];
    $what =~ tr/"\n//d;
    local $@;
    return undef if eval "package $CodePkg; no strict 'vars'; no warnings 'once';\n#line 1 \"$what\"\n$code\n;1";
    my $err = $@ || 'unknown error'; chomp $err; $err;
}

sub idx {
    my ($name, $b, $sec, $i, $multi) = @_;
    my $v = expand($b->$sec);
    return $v->[$i] if ref $v eq 'ARRAY';
    die "$name - --- $sec must be an array (one entry per request) when --- request is an array\n"
        if $multi && defined $v;
    $v;
}

sub parse_request_section {     # Test::Nginx: "METHOD [URI [VERSION]]\nbody"
    my ($name, $req, $more) = @_;
    1 while $req =~ s/^\s*#[^\n]*(?:\n|\z)// || $req =~ s/^\s+//;
    my ($line, $body) = split /\n/, $req, 2;
    my ($m, $uri, $ver) = split ' ', $line;
    die "$name - bad request line: '$line'\n" unless defined $m;
    my @h;
    for (split /\n+/, $more // '') {
        next if /^\s*#/ || !/\S/;
        my ($k, $v) = split /:\s*/, $_, 2;
        push @h, [$k, $v // ''];
    }
    my %a = (method => $m, path => $uri // '/', version => $ver // 'HTTP/1.1', headers => \@h);
    $body =~ s/^\s+|\s+$//gs
        if defined $body && !grep { $_->[0] =~ /^(?:content-length|transfer-encoding)$/i } @h;
    $a{body} = $body if defined $body && length $body;
    %a;
}

sub check_response {
    my ($name, $b, $r, $i, $multi) = @_;
    my $n = $multi ? "$name (req $i)" : $name;
    my $sub = sub { my $t = shift; return $t unless defined $t && !ref $t; $t =~ s/\$ServerPort\b/$Port/g; $t };
    ok(0, "$n - request failed: $r->{error}") if $r->{timed_out} || !defined $r->{status};
    ok(0, "$n - malformed response: $r->{error}") if defined $r->{status} && ($r->{error} // '') =~ /chunk/;
    diag("$n - WARNING: $r->{error}") if defined $r->{status} && $r->{error} && $r->{error} !~ /chunk/;
    if (defined(my $like = idx($name, $b, 'error_code_like', $i, $multi))) {
        like($r->{status} // '', qr/$like/m, "$n - status code ok");
    } else {
        my $code = idx($name, $b, 'error_code', $i, $multi) // 200; $code =~ s/^\s+|\s+$//g;
        is($r->{status} // '', $code, "$n - status code ok");
    }
    for my $sec (qw(raw_response_headers_like raw_response_headers_unlike)) {
        my $p = idx($name, $b, $sec, $i, $multi) // next;
        ($sec =~ /unlike/ ? \&unlike : \&like)->($r->{raw_headers}, qr/$p/s, "$n - raw resp headers " . ($sec =~ /unlike/ ? 'unlike' : 'like'));
    }
    for my $sec (qw(response_headers response_headers_like)) {
        my $spec = idx($name, $b, $sec, $i, $multi) // next;
        for (split /\n/, $spec) {
            s/^\s+|\s+$//g; next unless length;
            my $absent = s/^!\s*//;
            my ($k, $v) = $absent ? ($_, undef) : split /\s*:\s*/, $_, 2;
            my $got = $r->{headers}{lc $k};
            if ($sec eq 'response_headers_like') { like($got // '', qr/^$v$/, "$n - header $k like ok") }
            elsif (!defined $v || !length $v) { ok(!defined $got, "$n - header $k not present") or diag("got: $got") }
            else { is($got // '', $sub->($v), "$n - header $k ok") }
        }
    }
    if (defined(my $exp = idx($name, $b, 'response_body', $i, $multi))) {
        ref $exp eq 'Regexp' ? like($r->{body}, $exp, "$n - response_body - like")
                             : is($r->{body}, $sub->($exp), "$n - response_body - response is expected");
    }
    for my $sec (qw(response_body_like response_body_unlike)) {
        my $p = $sub->(idx($name, $b, $sec, $i, $multi)) // next;
        ($sec =~ /unlike/ ? \&unlike : \&like)->($r->{body}, qr/$p/s, "$n - $sec - response is expected");
    }
}

sub start_failure {
    my ($name, $st, $why) = @_;
    ok(0, "$name - nginx failed to start: $why" . (defined $st ? " (wait status $st)" : ''));
    diag("--- nginx stderr:\n" . tail(slurp("$ServRoot/logs/stderr.log"), 30));
    diag("--- error.log (tail):\n" . tail(slurp("$ServRoot/logs/error.log"), 30));
    diag("--- conf/nginx.conf:\n" . conf_listing());
}

sub run_block {
    my $b = shift;
    my $name = $b->name;
    our $CurBlock = $name;
    if (my @unknown = grep { !$Known{$_} } @{ $b->{_section_order}[0] || [] }) {     # never pass vacuously
        return ok(0, "$name - unsupported section(s) --- @unknown: this harness would silently ignore them");
    }
    if (defined(my $se = $b->skip_eval)) {
        my ($n, $code) = $se =~ /^\s*(\d+)\s*:\s*(.*)$/s or die "$name - bad --- skip_eval: $se\n";
        my $skip = eval "package TB::Nginx; no strict 'vars';\n$code";
        die "$name - skip_eval failed: $@" if $@;
        if ($skip) { SKIP: { skip("$name - skip_eval", $n) } return }
    }
    mock_reset() if $MockPid;
    peer_stop();
    if ($RedisPid) { my $r = redis_cmd('FLUSHALL'); die "FLUSHALL: $r->{error}\n" if ref $r eq 'HASH' }
    setup_servroot();
    write_user_files(expand($b->user_files));
    write_conf($b);
    my ($ok, $st, $why) = start_nginx();
    if (defined(my $md = $b->must_die)) {
        $md =~ s/^\s+|\s+$//g;
        if ($ok) { ok(0, "$name - nginx must die but it does not"); stop_nginx() }
        elsif (!defined $st) { start_failure($name, $st, $why); return }
        elsif ($md =~ /^\d+$/) { is($st >> 8, $md, "$name - die with the expected exit code")
                                     or diag("nginx stderr:\n" . slurp("$ServRoot/logs/stderr.log")) }
        else { isnt($st, 0, "$name - die as expected") }
        check_logs($name, $b, log_text(0, 0));
        return;
    }
    return start_failure($name, $st, $why) unless $ok;
    my $end_check = sub {
        if ($PeerPid) {     # the second instance first: its logs are checked as the first's
            my @p = peer_stop();
            ok(0, "$name - the peer nginx ended with wait status $p[0]") if @p && (!defined $p[0] || $p[0]);
            crash_check("$name (peer)", $b, peer_log());
        }
        my @s = stop_nginx();
        if (!@s || !defined $s[0] || ($s[0] & 127) || $s[0] >> 8) {
            ok(0, "$name - nginx " . (!@s ? 'was not running at the end of the block'
                : !defined $s[0] ? 'could not be stopped' : "ended with wait status $s[0] (after SIG$s[1])"));
        } elsif ($s[1] ne 'QUIT') { diag("$name - nginx did not exit on QUIT within 5 s, needed SIG$s[1]") }
        crash_check($name, $b, log_text(0, 0));
    };
    if (defined(my $init = $b->init)) {
        if (my $err = run_code($init, "$name --- init", $b)) {
            ok(0, "$name - --- init died: $err"); return $end_check->();
        }
    }
    for my $rep (1 .. $RepeatEach) {
        $rep == 1 ? (@LogOff = (0, 0)) : log_mark();    # the block's logs start with nginx's start
        my $req = expand($b->request);
        my $multi = ref $req eq 'ARRAY';
        my $timeout = parse_time($b->timeout) // $Timeout;
        my @resp;
        my $ok = eval {
            my @reqs = !defined $req ? () : $multi ? @$req : ($req);
            die "$name - no --- request section\n" unless @reqs || defined $b->check;
            for my $i (0 .. $#reqs) {
                my $more = $b->more_headers;
                $more = ref $more eq 'ARRAY' ? $more->[$i] : $more;
                my %a = parse_request_section($name, $reqs[$i], expand($more));
                my $r = http_request(%a, timeout => $timeout);
                push @resp, $r;
                check_response($name, $b, $r, $i, $multi);
            }
            1;
        };
        chomp(my $err = $@);
        ok(0, $err) unless $ok;
        if (defined(my $code = $b->check)) {
            my $err = run_code($code, "$name --- check", $b, @resp);
            ok(0, "$name - --- check died: $err") if $err;
        }
        sleep(parse_time($b->wait)) if $b->wait;
        wait_idle();
        check_logs($name, $b, log_text());
    }
    $end_check->();
}

sub add_block_preprocessor { push @Preprocessors, $_[0] }

# sections a preprocessor gives a meaning to (TB::Spec's): known, so not
# refused as sections this harness would ignore
sub declare_sections { $Known{$_} = 1 for @_ }

# "--- x eval" sections run in the suite's package too, where its own subs
# and what it imported are (Test::Base evaluates them in its filter's).
{
    require Test::Base::Filter;
    no warnings 'redefine';
    *Test::Base::Filter::eval = sub {
        my $self = shift;
        $self->assert_scalar(@_);
        my @return = CORE::eval("package $CodePkg; no strict 'vars'; no warnings 'once';\n"
                                . "#line 1 \"--- eval section\"\n" . shift);
        return $@ if $@;
        return @return;
    };
}

sub run_tests {
    Test::More::plan('no_plan') unless Test::More->builder->has_plan;
    $CodePkg = caller;
    my @blocks = Test::Base::blocks();
    @blocks = shuffle @blocks unless $NoShuffle;
    for my $b (@blocks) {
        $_->($b) for @Preprocessors;
        $b->set_value(name => "$0 " . $b->name) unless $b->name =~ /^\Q$0 /;
        my $name = $b->name;
        eval { run_block($b); 1 } or do {
            ok(0, "$name - harness error: $@");
            stop_nginx();
        };
    }
}

1;
