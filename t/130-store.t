# The SQLite store file: created, in WAL mode and checked at every load;
# a file that cannot serve stops nginx -t and start, naming the problem.
use lib 't/lib';
use TB::Nginx;
use TB::Gateway;
use IPC::Open2;

master_on();
workers(2);
no_shuffle();
mock_start();

our $Store = <<'_EOY_';
store:
  backend: sqlite
accounts:
  - id: a1
    api_key: sk-a1
    base_url: http://127.0.0.1:${TEST_NGINX_MOCK_PORT}
keys:
  - key: tenant-key
    name: tenant
  - key: admin-key
    name: ops
    admin: true
_EOY_

gateway_suite();
run_tests();

__DATA__

=== TEST 1: the store file is created beside the YAML, in WAL mode, with its schema, and nginx serves
--- user_files eval
">>> tb.yaml\n$::Store"
--- request eval
"POST /v1/messages\n" . msg_body()
--- more_headers
x-api-key: tenant-key
--- error_code: 200
--- check
my $db = servroot() . '/html/tokenbiryani.db';
ok(-f $db, 'store.path is relative to the YAML file');
is(sprintf('%o', (stat $db)[2] & 07777), '600', 'readable by nginx alone (0600)');
is((getpwuid((stat $db)[4]))[0], 'nobody', 'owned by the workers\' user, as are its -wal and -shm')
    if $> == 0;
is_deeply([map { -e "$db$_" ? sprintf('%o', (stat "$db$_")[2] & 07777) : 'absent' } qw(-wal -shm)],
          ['600', '600'], 'which stay beside it, 0600');
is(sqlite_py('print(db.execute("PRAGMA journal_mode").fetchone()[0])', file => $db), 'wal',
   'in WAL mode');
is(sqlite_py('print(db.execute("SELECT value FROM tb_meta WHERE name = \"schema\"").fetchone()[0])', file => $db),
   '1', 'with its schema');
my ($rc, $out) = nginx_t($::Store);
is($rc, 0, 'and nginx -t passes again on the same file') or diag($out);



=== TEST 2: files that cannot serve stop nginx -t, each named with its problem
--- user_files eval
">>> tb.yaml\n$::Store"
--- request
GET /healthz
--- error_code: 200
--- check
my $dir = servroot() . '/html';
my $yaml = sub { my $path = shift; $::Store =~ s/backend: sqlite\n/backend: sqlite\n  path: $path\n/r };

# not a database
TB::Nginx::spew("$dir/text.db", "this is a text file, not a database\n" x 100);
my ($rc, $out) = nginx_t($yaml->('text.db'));
isnt($rc, 0, 'a text file: nginx -t fails');
like($out, qr{tokenbiryani: the store file "\S+/text\.db" is not an SQLite database}, 'named') or diag($out);

# a directory that does not exist, and a directory in the file's place
($rc, $out) = nginx_t($yaml->("$dir/no/such/dir/tb.db"));
isnt($rc, 0, 'a missing directory: nginx -t fails');
like($out, qr{the store file "\S+/no/such/dir/tb\.db" cannot be opened or created}, 'named') or diag($out);
mkdir "$dir/adir.db";
($rc, $out) = nginx_t($yaml->('adir.db'));
isnt($rc, 0, 'a directory: nginx -t fails');
like($out, qr{the store file "\S+/adir\.db" cannot be opened or created}, 'named') or diag($out);

# corrupt: a real database whose pages were overwritten
sqlite_py('db.execute("CREATE TABLE t (x TEXT)")
for i in range(2000): db.execute("INSERT INTO t VALUES (?)", ("row %d " % i * 20,))
db.execute("CREATE INDEX ti ON t (x)")', file => "$dir/bad.db");
open(my $f, '+<', "$dir/bad.db") or die "bad.db: $!";
binmode $f;
seek($f, 4096 * 3, 0);
print $f "\xff" x (4096 * 4);
close $f;
($rc, $out) = nginx_t($yaml->('bad.db'));
isnt($rc, 0, 'corrupt pages: nginx -t fails');
like($out, qr{the store file "\S+/bad\.db" is corrupt}, 'named') or diag($out);

# written by a newer version
sqlite_py('db.execute("CREATE TABLE tb_meta (name TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL)")
db.execute("INSERT INTO tb_meta VALUES (\"schema\", \"99\")")', file => "$dir/new.db");
($rc, $out) = nginx_t($yaml->('new.db'));
isnt($rc, 0, 'a newer schema: nginx -t fails');
like($out, qr{the store file "\S+/new\.db" has schema 99, this build reads up to 1}, 'named') or diag($out);

# the file the running nginx uses is untouched by all of this
is(http_request(method => 'GET', path => '/healthz')->{status}, 200, 'still serving');



=== TEST 3: a store file another process holds locked: named, after a bounded wait
--- user_files eval
">>> tb.yaml\n$::Store"
--- request
GET /healthz
--- error_code: 200
--- check
my $db = servroot() . '/html/tokenbiryani.db';
# another process takes the write lock and says so; it holds it until its
# standard input closes
my $pid = open2(my $from, my $to, 'python3', '-c', 'import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.read()
db.execute("ROLLBACK")', $db);
is(scalar <$from>, "locked\n", 'another process holds the write lock');
my ($rc, $out) = nginx_t($::Store);
isnt($rc, 0, 'nginx -t fails');
like($out, qr{the store file "\S+/tokenbiryani\.db" is locked by another process}, 'named') or diag($out);
close $to;
waitpid($pid, 0);
($rc, $out) = nginx_t($::Store);
is($rc, 0, 'once the lock is gone, nginx -t passes') or diag($out);



=== TEST 4: the secret key credentials are sealed under: a file made 0600 beside the YAML, or TOKENBIRYANI_SECRET_KEY; a readable or malformed one stops nginx -t
--- user_files eval
">>> tb.yaml\n$::Store"
--- request
GET /healthz
--- error_code: 200
--- check
my $dir = servroot() . '/html';
my $kf = "$dir/tokenbiryani.key";
ok(-f $kf, 'store.secret_key_path: made beside the YAML file');
is(sprintf('%o', (stat $kf)[2] & 07777), '600', 'mode 0600');
like(TB::Nginx::slurp($kf), qr/^[0-9a-f]{64}\n?$/, '64 hex digits');
my $st = json_decode(http_request(method => 'GET', path => '/admin/status',
                                  headers => { 'x-api-key' => 'admin-key' })->{body} // '{}');
my $sk = $st->{store}{secret_key} // {};
is($sk->{source}, 'file', '/admin/status: from the file');
like($sk->{id}, qr/^[0-9a-f]{8}$/, 'with its id');
my $key = TB::Nginx::slurp($kf); chomp $key;
unlike(json_encode($st), qr/\Q$key\E/, 'and never the key');

# readable by others: refused
chmod 0644, $kf;
my ($rc, $out) = nginx_t($::Store);
isnt($rc, 0, 'a key file others may read: nginx -t fails');
like($out, qr{\Q$kf\E}, 'naming it') or diag($out);
chmod 0600, $kf;

# the environment wins over the file; a malformed value is refused
{
    local $ENV{TOKENBIRYANI_SECRET_KEY} = 'not-hex';
    ($rc, $out) = nginx_t($::Store);
    isnt($rc, 0, 'a malformed TOKENBIRYANI_SECRET_KEY: nginx -t fails');
    like($out, qr/TOKENBIRYANI_SECRET_KEY must be 64 hex digits/, 'saying what it must be') or diag($out);
    $ENV{TOKENBIRYANI_SECRET_KEY} = 'ab' x 32;
    unlink $kf;
    ($rc, $out) = nginx_t($::Store);
    is($rc, 0, 'a good one: nginx -t passes') or diag($out);
    ok(!-e $kf, 'and no key file is made');
}



=== TEST 5: the master, as root, never follows a link where the store's files are, and refuses a store directory the workers' user could write
--- user_files eval
">>> tb.yaml\n$::Store"
--- request
GET /healthz
--- check
SKIP: {
skip 'the master runs as root only when the suite does', 6 unless $> == 0;
my $db = servroot() . '/html/tokenbiryani.db';
my $target = servroot() . '/elsewhere.db';
TB::Nginx::stop_nginx();
# the store file itself a link to a file elsewhere (a database, as SQLite
# follows it): the master changes nothing of what it points at
rename $db, $target or die "rename: $!\n";
unlink "$db-wal", "$db-shm";
chmod 0640, $target;
chown 0, 0, $target;
symlink($target, $db) or die "symlink: $!\n";
start_again();
my @st = stat $target;
is(sprintf('%o', $st[2] & 07777), '640', 'the store file a link: its target\'s mode untouched');
is($st[4], 0, 'and its owner');
like(TB::Nginx::slurp(servroot() . '/logs/error.log'), qr/tokenbiryani\.db" is left as it is: it cannot be opened as a file of its own/,
     'said');
TB::Nginx::stop_nginx();
unlink $db;
rename $target, $db or die "rename: $!\n";
unlink "$target-wal", "$target-shm";

# a directory the workers' user (nobody) could write: a link put there
# would be followed as root at the next start
my $dir = servroot() . '/html';
my $mode = (stat $dir)[2] & 07777;
chmod 0777, $dir;
my ($rc, $out) = nginx_t($::Store);
isnt($rc, 0, 'a world-writable store directory: nginx -t fails');
like($out, qr/the store's directory ".*html" can be written by the workers' user/, 'naming it and why');
chmod $mode, $dir;
($rc, $out) = nginx_t($::Store);
is($rc, 0, 'once it is root\'s alone, it passes') or diag($out);
start_again();
}
