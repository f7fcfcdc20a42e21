# The SQLite store while nginx runs: the request history written behind the
# zone at least every second and read back at start; a kill -9 of master and
# workers in the middle of admin writes loses no acknowledged write; a store
# that cannot be written degrades to memory with one log line and recovers.
use lib 't/lib';
use TB::Nginx;
use TB::Gateway;
use Time::HiRes qw(time);

master_on();
workers(2);
no_shuffle();
mock_start();

our $Yaml = <<'_EOY_';
server:
  allow_private_hosts: true     # the mock is on loopback
store:
  backend: sqlite
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
_EOY_

sub request_ids { [map { $_->{request_id} } @{ admin_get('/admin/requests?limit=500')->{requests} }] }

{
    no strict 'refs';
    *{"TB::Nginx::$_"} = \&{$_} for qw(request_ids);
}

gateway_suite(yaml => ">>> tb.yaml\n$Yaml");
run_tests();

__DATA__

=== TEST 1: the inspector and the events survive a restart, under the accounts they named
--- request
GET /healthz
--- error_code: 200
--- check
for my $i (1 .. 12) {
    is(message_with('admin-key')->{status}, 200, "request $i");
}
my $before = request_ids();
is(scalar @$before, 12, 'twelve requests in the inspector');
my $rec = admin_get("/admin/requests/$before->[0]");
my $events = admin_get('/admin/events?limit=500');
ok(scalar @{ $events->{events} } >= 24, 'and their events');

restart();

is_deeply(request_ids(), $before, 'after a restart, /admin/requests shows the same requests, newest first');
my $again = admin_get("/admin/requests/$before->[0]");
is_deeply($again, $rec, 'a record reads back as it was, its account by id');
my $ev2 = admin_get('/admin/events?limit=500');
is_deeply([map { $_->{id} } @{ $ev2->{events} }], [map { $_->{id} } @{ $events->{events} }],
          'the events too');
like(TB::Nginx::slurp(servroot() . '/logs/error.log'), qr/history read back: 12 requests, \d+ events/,
     'the master says what it read back');

# new requests number on from the old ones
is(message_with('admin-key')->{status}, 200, 'one more');
# its record is written as its request ends, just after the answer
poll_until(5, sub { @{ request_ids() } == 13 });
my $after = request_ids();
is(scalar @$after, 13, 'thirteen');
is_deeply([@$after[1 .. 12]], $before, 'the new one on top of the old');



=== TEST 2: kill -9 of master and workers during a burst of admin writes and requests: every acknowledged write is there, the history within a second of the kill
--- timeout: 60
--- request
GET /healthz
--- error_code: 200
--- check
my $dir = servroot() . '/logs';
# writers in children: each mints keys one after another and notes each
# acknowledged one (201) with its secret; a requester sends messages
my @kids;
for my $w (1 .. 4) {
    my $pid = fork // die;
    if ($pid == 0) {
        open my $fh, '>>', "$dir/acked.$w" or POSIX::_exit(1);
        $fh->autoflush(1);
        for my $i (1 .. 400) {
            my $r = eval { http_request(%{ admin_args(POST => '/admin/keys', { name => "w$w-$i" },
                                                       timeout => 5) }) };
            last unless $r && $r->{status};
            print $fh "w$w-$i " . json_decode($r->{body})->{key} . "\n" if $r->{status} == 201;
        }
        POSIX::_exit(0);
    }
    push @kids, $pid;
}
my $rq = fork // die;
if ($rq == 0) {
    for (1 .. 2000) {
        my $r = eval { message_with('admin-key') };
        last unless $r && $r->{status};
    }
    POSIX::_exit(0);
}
push @kids, $rq;
# and one adding accounts (each probed first) and removing the tenth
# before, noting each acknowledged add and removal
my $aw = fork // die;
if ($aw == 0) {
    open my $fh, '>>', "$dir/accounts.acked" or POSIX::_exit(1);
    $fh->autoflush(1);
    for my $i (1 .. 2000) {
        my $r = eval { http_request(%{ admin_args(POST => '/admin/accounts',
            { id => "acct-$i", api_key => "sk-acct-$i",
              base_url => "http://127.0.0.1:$ENV{TEST_NGINX_MOCK_PORT}" }, timeout => 5) }) };
        last unless $r && $r->{status};
        print $fh "+acct-$i\n" if $r->{status} == 201;
        next if $i <= 10;
        # a removal in flight when the kill comes may or may not be done
        print $fh '~acct-' . ($i - 10) . "\n";
        $r = eval { http_request(%{ admin_args(DELETE => '/admin/accounts/acct-' . ($i - 10), undef, timeout => 5) }) };
        last unless $r && $r->{status};
        print $fh '-acct-' . ($i - 10) . "\n" if $r->{status} == 200;
    }
    POSIX::_exit(0);
}
push @kids, $aw;

# some writes acknowledged, then everything killed at once
poll_until(20, sub { my $n = 0; $n += () = TB::Nginx::slurp("$dir/acked.$_") =~ /\n/g for 1 .. 4; $n >= 40 })
    or die "the writers did not get going\n";
# and ten accounts removed (what is asserted below): the flushes come
# every 100 ms under this load, and the kill could come before them
poll_until(20, sub { (() = TB::Nginx::slurp("$dir/accounts.acked") =~ /^-/mg) >= 10 })
    or die "the account writer did not remove ten accounts\n";
# a request the inspector has, then two flushes after it (the status says
# when the last one ended; the first may have gathered its records just
# before this one was seen, the second began after the first ended), then
# the kill: that request must survive it
my $seen_before = admin_get('/admin/requests?limit=1')->{requests}[0];
my $flushed_at = sub { my $f = admin_get('/admin/status')->{store}{flushed_seconds_ago};
                       defined $f ? time - $f : 0 };
my $after = time;
for my $n (1, 2) {
    poll_until(5, sub { $flushed_at->() > $after + 0.002 }) or die "no flush within 5 s\n";
    $after = $flushed_at->();
}
my $in_zone = scalar @{ admin_get('/admin/requests?limit=500')->{requests} };
my @pids = (nginx_pid(), worker_pids());
kill 'KILL', @pids;
my $killed_at = time;
poll_until(5, sub { !grep { TB::Nginx::alive($_) } @pids }) or die "nginx survived kill -9\n";
waitpid($_, 0) for @kids;
TB::Nginx::stop_nginx();   # reaps the master
unlink servroot() . '/logs/tb-status.sock';   # the harness's, left by the kill

my %acked;
for my $w (1 .. 4) {
    for (split /\n/, TB::Nginx::slurp("$dir/acked.$w")) {
        my ($name, $secret) = split / /;
        $acked{$name} = $secret;
    }
}
ok(keys(%acked) >= 40, scalar(keys %acked) . ' writes acknowledged before the kill');
is(sqlite_py('print(db.execute("PRAGMA integrity_check").fetchone()[0])'), 'ok', 'the file is consistent after kill -9');

my (%added, %removed, %removing);
for (split /\n/, TB::Nginx::slurp("$dir/accounts.acked")) {
    /^([-+~])(.*)$/ or next;
    ($1 eq '+' ? \%added : $1 eq '-' ? \%removed : \%removing)->{$2} = 1;
}
# the one whose removal was sent and not answered is in doubt either way
my @doubt = grep { !$removed{$_} } keys %removing;
ok(@doubt <= 1, 'at most one removal in flight at the kill');
my @accounts = sort { ($a =~ /(\d+)/)[0] <=> ($b =~ /(\d+)/)[0] }
               grep { !$removed{$_} && !$removing{$_} } keys %added;
ok(keys(%removed) >= 10, scalar(keys %added) . ' accounts added and ' . scalar(keys %removed)
   . ' removed before the kill');

start_again();
my %listed_accounts = map { $_->{id} => $_ } @{ admin_get('/admin/accounts')->{accounts} };
is_deeply([grep { !$listed_accounts{$_} } @accounts], [], 'every acknowledged account is there after the restart');
is_deeply([grep { $listed_accounts{$_} } sort keys %removed], [], 'no acknowledged removal came back');
is_deeply([grep { $listed_accounts{$_}{state} ne 'ready' } @accounts], [], 'each ready to serve');
my ($tst, $tj) = admin(POST => "/admin/accounts/$accounts[-1]/test", undef);
is($tj->{ok}, JSON::PP::true, "the last one acknowledged ($accounts[-1]) opens its credential and is answered");
my $listed = admin_get('/admin/keys');
my %have = map { $_->{name} => 1 } @{ $listed->{keys} };
my @missing = grep { !$have{$_} } sort keys %acked;
is_deeply(\@missing, [], 'every acknowledged key is there after the restart');
my @sample = (sort keys %acked)[0, -1];
is(message_with($acked{$_})->{status}, 200, "and $_ works") for @sample;

# the history: what the inspector had a second before the kill is there
my $ids = request_ids();
ok(scalar @$ids > 0, scalar(@$ids) . " requests read back ($in_zone were in the inspector just before the kill; "
                     . 'what came after the last flush is what a kill -9 may lose)');
my $flush = admin_get('/admin/status')->{store};
is($flush->{state}, 'ok', 'the store is ok');
my $found = http_request(method => 'GET', path => "/admin/requests/$seen_before->{request_id}",
                         headers => { 'x-api-key' => 'admin-key' });
is($found->{status}, 200, "the newest request seen before the kill ($seen_before->{request_id}) is in the history read back");



=== TEST 3: a store another process holds locked: the write says nothing changed, the store shows degraded, serving goes on, and writes resume
--- timeout: 60
--- request
GET /healthz
--- error_code: 200
--- check
my ($pid, $from, $to) = store_locker();
is(scalar <$from>, "locked\n", 'another process holds the write lock');
TB::Nginx::log_mark();
my $t0 = time;
my ($st, $j) = admin(POST => '/admin/keys', { name => 'while-locked' });
my $took = time - $t0;
is($st, 503, 'the write: 503');
is($j->{error}{type}, 'api_error', 'Anthropic-shaped');
like($j->{error}{message}, qr/nothing was changed: the store cannot be written \(.*is locked by another process/,
     'says nothing changed, and why');
diag(sprintf('the write gave up after %.1f s of waiting for the lock', $took));
my $s = admin_get('/admin/status')->{store};
is($s->{state}, 'degraded', '/admin/status: degraded');
like($s->{error}, qr/locked by another process/, 'with the reason');
is(message_with('admin-key')->{status}, 200, 'serving goes on from the zone');
($st) = admin(GET => '/admin/keys/while-locked');
is($st, 404, 'the key was not made');
($st) = admin(POST => '/admin/keys', { name => 'while-locked-2' });
is($st, 503, 'a second write: 503 too');
my @lines = grep { /the store cannot be written/ } split /\n/, TB::Nginx::log_text();
is(scalar @lines, 1, 'the error log says it once') or diag(join "\n", @lines);

close $to;
waitpid($pid, 0);
($st, $j) = admin(POST => '/admin/keys', { name => 'after-lock' });
is($st, 201, "once the lock is gone, the write works") or diag(TB::Nginx::json_encode($j));
is(admin_get('/admin/status')->{store}{state}, 'ok', 'and the store is ok');
like(TB::Nginx::log_text(), qr/the store "[^"]+" is written again/, 'which the log says once');
is(message_with($j->{key})->{status}, 200, 'the key works');



=== TEST 4: admin writes in numbers: how long one takes to be durable
--- request
GET /healthz
--- error_code: 200
--- check
my @t;
for my $i (1 .. 50) {
    my $t0 = time;
    my ($st) = admin(POST => '/admin/keys', { name => "lat-$i" });
    push @t, (time - $t0) * 1000;
    is($st, 201, "write $i") if $st != 201;
}
@t = sort { $a <=> $b } @t;
diag(sprintf('admin write (mint, committed with synchronous=FULL): median %.1f ms, p90 %.1f ms, max %.1f ms over %d',
             $t[25], $t[45], $t[-1], scalar @t));
ok($t[25] < 1000, 'a write answers well within a second');
# the history is behind by at most a flush interval: a request's record is
# in the file within a second of its end
my $count = sub { sqlite_py('print(db.execute("SELECT count(*) FROM tb_history WHERE kind = 1").fetchone()[0])') };
my @lag;
for (1 .. 5) {
    my $n = $count->();
    message_with('admin-key');
    my $t0 = time;
    poll_until(5, sub { $count->() > $n }) or die "the record never reached the store\n";
    push @lag, (time - $t0) * 1000;
}
@lag = sort { $a <=> $b } @lag;
diag(sprintf('a request\'s record reached the store file %.0f ms (median of 5), at most %.0f ms after its end',
             $lag[2], $lag[-1]));
ok($lag[-1] < 1500, 'within the flush interval (1 s) and a commit');
