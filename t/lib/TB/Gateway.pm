package TB::Gateway;

# Shared pieces of the gateway's suites (and, through gateway_suite, the
# declarative sections of TB::Spec): the nginx.conf fragments, request
# bodies, small parsers for what the mock logged and the client got, the
# admin API, restarts and nginx -t, and the SQLite store read from outside.

use strict;
use warnings;
use Exporter 'import';
use JSON::PP ();
use IPC::Open2 ();
use POSIX ();
use Time::HiRes ();
use TB::Spec ();

our @EXPORT = qw($HttpConfig $Locations gateway_suite pool_yaml
                 msg_body stream_body sse_events
                 count_events credentials_of big_body turn_body
                 admin_get admin_post pool_status account_of quiet_pool_ok
                 bg_request bg_result
                 admin admin_args message_with message_args restart start_again
                 nginx_t db_file sqlite_py sqlite_rows store_locker
                 read_back_listed listed_before_read_back);



# $TEST_NGINX_* is expanded by the harness; ${VAR} by the module itself.
our $HttpConfig = <<'_EOC_';
    tokenbiryani_zone   tb 8m;
    tokenbiryani_config $TEST_NGINX_HTML_DIR/tb.yaml;
_EOC_

our $Locations = <<'_EOC_';
    location /v1/       { tokenbiryani_pass; }
    location /admin/    { tokenbiryani_admin; }
    location = /healthz { tokenbiryani_healthz; }
_EOC_

my $JSON = JSON::PP->new->canonical;

# A gateway suite's blocks carry only their own sections: those they leave
# out are the gateway's nginx.conf fragments and the suite's YAML file.
sub gateway_suite {
    my (%o) = @_;
    TB::Spec::install();
    TB::Nginx::add_block_preprocessor(sub {
        my $b = shift;
        $b->set_value(http_config => $o{http_config} // $HttpConfig)
            unless defined $b->http_config;
        $b->set_value(config => $o{config} // $Locations)
            unless defined $b->config;
        $b->set_value(user_files => $o{yaml})
            if defined $o{yaml} && !defined $b->user_files;
    });
}

# The YAML of a pool, as a --- user_files entry:
#   accounts => N             a1..aN (sk-a1...) on the mock's ports 1..N
#   accounts => [{...}, ...]  each { id, port => 1..4 (a mock port, the
#                             default 1) or dead => 1, and any other key
#                             of an account, written as YAML flow values }
#   keys => [{...}, ...]      the keys; default: tenant-key (tenant) and
#                             admin-key (admin); [] for none (open mode)
#   yaml => "..."             other sections, YAML text, written first
sub pool_yaml {
    my (%o) = @_;
    my @acc = ref $o{accounts} ? @{ $o{accounts} }
            : map { { id => "a$_", port => $_ } } 1 .. ($o{accounts} // 1);
    my @keys = $o{keys} ? @{ $o{keys} }
             : ({ key => 'tenant-key', name => 'tenant' },
                { key => 'admin-key', name => 'admin', admin => 'true' });
    my $port = sub {
        my $p = shift // 1;
        $p eq 'dead' ? '${TEST_NGINX_DEAD_PORT}'
        : $p =~ /^[1-4]$/ ? '${TEST_NGINX_MOCK_PORT' . ($p == 1 ? '' : $p) . '}' : $p;
    };
    my $item = sub {
        my ($h, @first) = @_;
        my @k = (@first, grep { my $k = $_; !grep { $_ eq $k } @first } sort keys %$h);
        my $out = '';
        for my $i (0 .. $#k) {
            next unless defined $h->{ $k[$i] };
            $out .= ($out eq '' ? '  - ' : '    ') . "$k[$i]: $h->{ $k[$i] }\n";
        }
        $out;
    };
    my $y = ">>> tb.yaml\n" . ($o{yaml} // '') . "accounts:\n";
    for my $a (@acc) {
        my %a = %$a;
        my $p = delete $a{port};
        $a{api_key} //= "sk-$a{id}";
        $a{base_url} //= 'http://127.0.0.1:' . $port->($p);
        $y .= $item->(\%a, qw(id api_key base_url));
    }
    if (@keys) {
        $y .= "keys:\n";
        $y .= $item->($_, qw(key name)) for @keys;
    }
    $y;
}

sub msg_body {
    my (%o) = @_;
    my %b = (model => $o{model} // 'claude-sonnet-4-6',
             max_tokens => $o{max_tokens} // 64,
             messages => $o{messages}
                         // [{ role => 'user', content => $o{text} // 'hello' }]);
    $b{stream} = JSON::PP::true if $o{stream};
    $b{system} = $o{system} if defined $o{system};
    $JSON->encode(\%b);
}

sub stream_body { msg_body(@_, stream => 1) }

# turn $t (from 1) of conversation $conv, as an agent client sends it: the
# same system prompt and tools every turn, the history growing, and the
# cache_control breakpoint moved to the newest message
sub turn_body {
    my ($conv, $t, %o) = @_;
    my @msgs = ({ role => 'user', content => [{ type => 'text',
                  text => "Task $conv: " . ('describe the repository. ' x 20) }] });
    for my $i (1 .. $t - 1) {
        push @msgs, { role => 'assistant', content => "answer $i of $conv" },
                    { role => 'user', content => [{ type => 'text', text => "go on ($i)" }] };
    }
    $msgs[-1]{content}[-1]{cache_control} = { type => 'ephemeral' };
    my %b = (model => $o{model} // 'claude-sonnet-4-6',
             max_tokens => $o{max_tokens} // 512,
             system => [{ type => 'text', text => $o{system}
                          // ('You are a careful engineer. ' x 200),
                          cache_control => { type => 'ephemeral' } }],
             tools => [map { +{ name => $_, description => "the $_ tool",
                                input_schema => { type => 'object' } } }
                       qw(bash edit read)],
             messages => \@msgs);
    $b{stream} = JSON::PP::true if $o{stream};
    $JSON->encode(\%b);
}

# a body of about $size bytes, valid JSON
sub big_body {
    my ($size, %o) = @_;
    my $text = join ' ', map { "word$_" } 1 .. int($size / 7);
    msg_body(%o, text => substr($text, 0, $size));
}

# [[event, data], ...] of an SSE body
sub sse_events {
    my $body = shift // '';
    my @ev;
    for my $block (split /\n\n/, $body) {
        my ($ev) = $block =~ /^event: (.*)$/m;
        my ($data) = $block =~ /^data: (.*)$/m;
        push @ev, [$ev, $data] if defined $ev || defined $data;
    }
    \@ev;
}

sub count_events {
    my ($body, $name) = @_;
    scalar grep { ($_->[0] // '') eq $name } @{ sse_events($body) };
}

sub credentials_of { [map { $_->{credential} // '-' } @{ $_[0] }] }

# the admin API, with the admin key the suites configure
sub admin_get {
    my ($path, $key) = @_;
    my $r = TB::Nginx::http_request(method => 'GET', path => $path,
                                    headers => { 'x-api-key' => $key // 'admin-key',
                                         'content-type' => 'application/json' });
    die "GET $path: " . ($r->{status} // 'no response') . " $r->{body}\n"
        unless ($r->{status} // 0) == 200;
    TB::Nginx::json_decode($r->{body});
}

sub admin_post {
    my ($path, $key) = @_;
    TB::Nginx::http_request(method => 'POST', path => $path, body => '',
                            headers => { 'x-api-key' => $key // 'admin-key',
                                         'content-type' => 'application/json' });
}

sub pool_status { admin_get('/admin/status', @_) }

sub account_of {
    my ($st, $id) = @_;
    (grep { $_->{id} eq $id } @{ $st->{accounts} })[0];
}

# nothing held, reserved or in flight anywhere, nobody queued
sub quiet_pool_ok {
    my $st = pool_status();
    Test::More::is($st->{leases}{held}, 0, 'no lease held');
    Test::More::is($st->{queue}{depth}, 0, 'nobody queued');
    for my $a (@{ $st->{accounts} }) {
        Test::More::is($a->{inflight}, 0, "$a->{id}: inflight 0");
        Test::More::is($a->{leases}, 0, "$a->{id}: leases 0");
        Test::More::is_deeply($a->{reserved}, { requests => 0, input_tokens => 0,
                                                output_tokens => 0 },
                              "$a->{id}: nothing reserved");
    }
    $st;
}

# the arguments of an admin API request, for http_request or
# http_requests_concurrent: $body is a Perl structure (sent as JSON), a
# string (sent as it is) or undef (an empty body); %o: key (the default
# admin-key), headers (more headers), timeout, port (another instance's)
sub admin_args {
    my ($method, $path, $body, %o) = @_;
    +{ method => $method, path => $path,
       headers => { 'x-api-key' => $o{key} // 'admin-key',
                    'content-type' => 'application/json', %{ $o{headers} // {} } },
       body => defined $body ? (ref $body ? TB::Nginx::json_encode($body) : $body) : '',
       defined $o{timeout} ? (timeout => $o{timeout}) : (),
       defined $o{port} ? (port => $o{port}) : () };
}

# an admin API request, whatever its answer: (status, the body decoded or
# undef when it is not JSON, the response)
sub admin {
    my $r = TB::Nginx::http_request(%{ admin_args(@_) });
    ($r->{status}, scalar eval { TB::Nginx::json_decode($r->{body}) }, $r);
}

# the arguments of POST /v1/messages with key $key, the body msg_body(%o)
sub message_args {
    my ($key, %o) = @_;
    my $port = delete $o{port};
    +{ method => 'POST', path => '/v1/messages', defined $port ? (port => $port) : (),
       headers => { 'x-api-key' => $key, 'content-type' => 'application/json',
                    'anthropic-version' => '2023-06-01' },
       body => msg_body(%o) };
}

# POST /v1/messages with key $key: the response
sub message_with { TB::Nginx::http_request(%{ message_args(@_) }) }

# starts the block's nginx again (after stop_nginx, or a kill); dies with
# the logs' tail when it does not come up
sub start_again {
    my ($ok, $st, $why) = TB::Nginx::start_nginx();
    return 1 if $ok;
    my $logs = TB::Nginx::slurp(TB::Nginx::servroot() . '/logs/error.log')
             . TB::Nginx::slurp(TB::Nginx::servroot() . '/logs/stderr.log');
    die "nginx did not start again: $why\n" . TB::Nginx::tail($logs, 20) . "\n";
}

# stops the block's nginx and starts it again, on the same files
sub restart {
    TB::Nginx::stop_nginx();
    start_again();
}

# @cmd run with stdout and stderr together, no shell: (exit code, output)
sub _run {
    my @cmd = @_;
    my $pid = open(my $fh, '-|') // die "fork: $!\n";
    if (!$pid) {
        open STDERR, '>&', \*STDOUT;
        exec { $cmd[0] } @cmd or print "exec $cmd[0]: $!\n";
        POSIX::_exit(127);
    }
    local $/;
    my $out = <$fh> // '';
    close $fh;
    ($? >> 8, $out);
}

# nginx -t on this block's nginx.conf, after writing $yaml to tb.yaml:
# (exit code, what it printed)
sub nginx_t {
    my $yaml = shift;
    TB::Nginx::write_user_file('tb.yaml', $yaml);
    _run($ENV{TEST_NGINX_BINARY} || 'nginx', '-t', '-p', TB::Nginx::servroot() . '/',
         '-c', 'conf/nginx.conf');
}

# the SQLite store the suites' YAML names (store.path's default)
sub db_file { TB::Nginx::servroot() . '/html/tokenbiryani.db' }

# another process holding the store file's write lock: (pid, its stdout,
# which says "locked" once it holds it, its stdin, which closed lets go)
sub store_locker {
    my $pid = IPC::Open2::open2(my $from, my $to, 'python3', '-c', 'import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.read()
db.execute("ROLLBACK")', db_file());
    ($pid, $from, $to);
}

# after a restart: /admin/requests lists what the store gave back, $last
# (the last responses before it, sent one at a time so that the ring kept
# up) among them; how many it lists
sub read_back_listed {
    my ($last) = @_;
    my (undef, $l) = admin(GET => '/admin/requests?limit=10');
    my @back = @{ $l->{requests} // [] };
    my $n = @$last;
    # (usually fewer than the ring holds: a slot none fills is not listed)
    Test::More::ok(@back >= $n && @back <= 4,
                   scalar(@back) . " requests read back: the last $n, and what was written before them");
    Test::More::is($back[0]{request_id}, $last->[-1]{headers}{'x-tokenbiryani-request-id'},
                   'the last before the restart listed first');
    Test::More::is(scalar(grep { length($_->{request_id} // '') } @back), scalar @back,
                   'each one a request: no empty slot listed');
    Test::More::is_deeply([map { $_->{started_at} } @back],
                          [sort { $b cmp $a } map { $_->{started_at} } @back], 'newest first');
    scalar @back;
}

# $one, answered after the restart, listed first, then the $nback read
# back, as a ring of 4 holds them
sub listed_before_read_back {
    my ($one, $nback) = @_;
    TB::Nginx::request_record($one);    # (written once its request is logged)
    my (undef, $l) = admin(GET => '/admin/requests?limit=10');
    Test::More::is($l->{requests}[0]{request_id}, $one->{headers}{'x-tokenbiryani-request-id'},
                   'listed first, before what was read back');
    Test::More::is(scalar @{ $l->{requests} }, $nback < 4 ? $nback + 1 : 4,
                   'with what was read back after it, as the ring holds');
}

# runs Python $code with db, python3's sqlite3 connection to the store (or
# to file => ...; autocommit, waiting up to 10 s for a lock): what it
# printed, stderr included, without the last newline
sub sqlite_py {
    my ($code, %o) = @_;
    my (undef, $out) = _run('python3', '-c', "import sqlite3, sys\n"
        . "db = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=10)\n$code",
        $o{file} // db_file());
    chomp $out;
    $out;
}

# the rows of $sql (with ? bound to @$args) in the store (or file => ...):
# [{ column => value }, ...], a BLOB as hex; dies with what sqlite3 said.
# Read-only, as an operator's backup should be: a writable connection that
# is the file's last would remove the -wal and -shm files the workers own,
# and make them again as root
sub sqlite_rows {
    my ($sql, $args, %o) = @_;
    my ($rc, $out) = _run('python3', '-c', <<'_EOP_', $o{file} // db_file(), $sql,
import json, sqlite3, sys
db = sqlite3.connect('file:' + sys.argv[1] + '?mode=ro', uri=True, isolation_level=None, timeout=10)
db.row_factory = sqlite3.Row
rows = db.execute(sys.argv[2], json.loads(sys.argv[3])).fetchall()
print(json.dumps([dict(r) for r in rows], default=lambda b: b.hex()))
_EOP_
                          TB::Nginx::json_encode($args // []));
    die "sqlite_rows: $sql: $out" if $rc;
    TB::Nginx::json_decode($out);
}

# a request in a child process; bg_result() waits for it and returns the
# response, with done_at: when the client had all of it (epoch seconds)
my $BgSeq = 0;

sub bg_request {
    my (%args) = @_;
    my $file = TB::Nginx::servroot() . "/logs/bg." . $$ . "." . ++$BgSeq . ".json";
    my $pid = fork // die "fork: $!\n";
    if ($pid == 0) {
        my $r = TB::Nginx::http_request(%args);
        $r->{done_at} = Time::HiRes::time();
        delete $r->{raw};
        open my $fh, '>', "$file.tmp" or POSIX::_exit(1);
        print $fh $JSON->encode($r);
        close $fh;
        rename "$file.tmp", $file;
        POSIX::_exit(0);
    }
    { pid => $pid, file => $file };
}

sub bg_result {
    my $h = shift;
    waitpid($h->{pid}, 0);
    open my $fh, '<', $h->{file} or die "no result for a background request\n";
    local $/;
    my $r = $JSON->decode(<$fh>);
    close $fh;
    $r;
}

1;
