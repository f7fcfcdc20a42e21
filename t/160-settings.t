# /admin/settings: what runs and where each value comes from, the strategy
# changed at runtime for every worker and kept across restarts;
# /admin/reload: the YAML file checked in the thread pool, the master
# signalled only when it loads.
use lib 't/lib';
use TB::Nginx;
use TB::Gateway;

master_on();
workers(2);
no_shuffle();
mock_start();

our $Yaml = <<'_EOY_';
store:
  backend: sqlite
routing:
  strategy: sticky_headroom
retry:
  max_attempts: 4
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

# the strategies requests were decided by, in bursts on many connections
# until both workers have served some (or 20 bursts): counts by strategy,
# and how many workers served
sub strategies_of_burst {
    my $n = shift;
    my (%st, %workers);
    my $count = sub { scalar @{ admin_get('/admin/requests?limit=1000')->{requests} } };
    for my $round (1 .. 20) {
        my $before = $count->();
        my $r = http_requests_concurrent([map { message_args('tenant-key') } 1 .. $n]);
        die "a request failed\n" if grep { $_->{status} != 200 } @$r;
        # the records are written as the requests end, just after the answers
        poll_until(5, sub { $count->() >= $before + $n }) or die "the records did not come\n";
        for (@{ admin_get("/admin/requests?limit=$n")->{requests} }) {
            $st{admin_get("/admin/requests/$_->{request_id}")->{decision}{strategy}}++;
            $workers{$_->{worker}}++;
        }
        last if keys %workers == 2;
    }
    (\%st, scalar keys %workers);
}

{
    no strict 'refs';
    *{"TB::Nginx::$_"} = \&{$_} for qw(strategies_of_burst);
}

gateway_suite(yaml => ">>> tb.yaml\n$Yaml");
run_tests();

__DATA__

=== TEST 1: every setting with its value and its source
--- request
GET /healthz
--- error_code: 200
--- check
my ($st, $j) = admin(GET => '/admin/settings');
is($st, 200, 'GET /admin/settings');
my $s = $j->{settings};
is_deeply([@{ $s->{'routing.strategy'} }{qw(value source file_value settable)}],
          ['sticky_headroom', 'file', 'sticky_headroom', JSON::PP::true], 'the strategy: the file\'s, settable');
ok((grep { $_ eq 'round_robin' } @{ $s->{'routing.strategy'}{options} }), 'with the strategies it can be');
is_deeply([@{ $s->{'retry.max_attempts'} }{qw(value source settable)}], [4, 'file', JSON::PP::false],
          'retry.max_attempts: 4, from the file');
is_deeply([@{ $s->{'retry.max_accounts'} }{qw(value source)}], [3, 'default'], 'retry.max_accounts: the default');
is($s->{'routing.weights.affinity'}{value}, 0.4, 'a weight');
is($s->{'store.backend'}{value}, 'sqlite', 'the store');
is($s->{'routing.output_estimate_quantile'}{value}, 0.95, 'every number of a listed section, from the schema');
is_deeply([sort grep { !/^(routing|retry|breaker|queue)\./ } keys %$s], ['observability.event_buffer', 'store.backend'],
          'of the other sections, only the store backend and the inspector size: no store url or password');
like($j->{config_file}, qr{/tb\.yaml$}, 'the file it read');
($st) = admin(GET => '/admin/settings', undef, key => 'tenant-key');
is($st, 403, 'a tenant may not look');



=== TEST 2: the strategy set at runtime holds in every worker at once, and across a restart, until cleared
--- request
GET /healthz
--- error_code: 200
--- check
my ($st, $j) = admin(POST => '/admin/settings', { 'routing.strategy' => 'round_robin' });
is($st, 200, 'set') or diag(explain($j));
is_deeply([@{ $j->{settings}{'routing.strategy'} }{qw(value source file_value)}],
          ['round_robin', 'runtime', 'sticky_headroom'], 'runtime, over the file\'s');
my ($by, $workers) = strategies_of_burst(8);
is_deeply([keys %$by], ['round_robin'], 'every request since was decided by it') or diag(explain($by));
is($workers, 2, 'in both workers');
is(admin_get('/admin/status')->{strategy}, 'round_robin', '/admin/status says so');

restart();
($st, $j) = admin(GET => '/admin/settings');
is($j->{settings}{'routing.strategy'}{source}, 'runtime', 'after a restart, still the runtime\'s');
($by) = strategies_of_burst(4);
is_deeply([keys %$by], ['round_robin'], 'and used');
like(TB::Nginx::slurp(servroot() . '/logs/error.log'), qr/routing\.strategy "round_robin", set at runtime, from the store/,
     'the master says where it came from');

($st, $j) = admin(POST => '/admin/settings', { strategy => undef });
is($st, 200, 'cleared with null');
is_deeply([@{ $j->{settings}{'routing.strategy'} }{qw(value source)}], ['sticky_headroom', 'file'], 'the file\'s again');
restart();
($by) = strategies_of_burst(4);
is_deeply([keys %$by], ['sticky_headroom'], 'and after a restart');



=== TEST 3: settings that cannot change at runtime, and bad input
--- request
GET /healthz
--- error_code: 200
--- check
for my $c (['{"retry.max_attempts": 9}', qr/retry\.max_attempts is the file's: change it there and POST \/admin\/reload/],
           ['{"store.password": "x"}', qr/store\.password is the file's: change it there/],
           ['{"colour": "red"}', qr/unknown setting "colour" \(settable at runtime: routing\.strategy\)/],
           ['{"routing.strategy": "fastest"}', qr/routing\.strategy must name a strategy this gateway has/],
           ['{"routing.strategy": 3}', qr/routing\.strategy must name a strategy/],
           ['[]', qr/the body must be a JSON object/],
           ['{"routing.strategy": "round_robin", "colour": 1}', qr/unknown setting "colour"/],
           ['{}', qr/nothing to change/],
           ['not json', qr/the body must be a JSON object/]) {
    my ($st, $j) = admin(POST => '/admin/settings', $c->[0]);
    is($st, 400, "$c->[0]: 400");
    is($j->{error}{type}, 'invalid_request_error', 'Anthropic-shaped');
    like($j->{error}{message}, $c->[1], 'says why');
}
is(admin_get('/admin/settings')->{settings}{'routing.strategy'}{value}, 'sticky_headroom', 'nothing changed');
my ($st) = admin(PUT => '/admin/settings', '{}');
is($st, 405, 'PUT: 405');
($st) = admin(GET => '/admin/reload');
is($st, 405, 'GET /admin/reload: 405');



=== TEST 4: POST /admin/reload: a file that does not load changes nothing and says where; one that loads is applied
--- request
GET /healthz
--- error_code: 200
--- check
my $gen = admin_get('/admin/status')->{gateway}{config_generation};
my $file = servroot() . '/html/tb.yaml';
my $good = TB::Nginx::slurp($file);
(my $broken = $good) =~ s/max_attempts: 4/max_attempts: many/;
TB::Nginx::spew($file, $broken);
# a file with credentials is root's alone, as in production: the workers
# (nobody) cannot read it, the check must not depend on them
chmod 0600, $file;
my ($st, $j) = admin(POST => '/admin/reload');
is($st, 400, 'a broken file: 400');
like($j->{error}{message}, qr{^nothing was changed: \S+/tb\.yaml:\d+: retry\.max_attempts}, 'the loader\'s error, with its line')
    or diag($j->{error}{message});
is(admin_get('/admin/status')->{gateway}{config_generation}, $gen, 'no reload happened');

(my $more = $good) =~ s/(keys:)/  - id: a3\n    api_key: sk-a3\n    base_url: http:\/\/127.0.0.1:\${TEST_NGINX_MOCK_PORT3}\n$1/;
$more =~ s/  - id: a2\n    api_key: sk-a2\n    base_url: [^\n]+\n//;
TB::Nginx::spew($file, $more);
chmod 0600, $file;
($st, $j) = admin(POST => '/admin/reload');
is($st, 200, 'a good file: 200') or diag(explain($j));
is_deeply([$j->{accounts}, $j->{added}, $j->{removed}], [['a1', 'a3'], ['a3'], ['a2']], 'what changes');
ok(poll_until(10, sub { admin_get('/admin/status')->{gateway}{config_generation} > $gen }), 'the master reloaded');
poll_until(10, sub { my $ids = join ',', map { $_->{id} } @{ admin_get('/admin/status')->{accounts} }; $ids eq 'a1,a3' })
    or fail('the new accounts serve');
is(join(',', map { $_->{id} } @{ admin_get('/admin/status')->{accounts} }), 'a1,a3', 'a3 in, a2 out');



=== TEST 5: with the memory backend the same API works, and forgets at a restart
--- user_files
>>> tb.yaml
accounts:
  - id: a1
    api_key: sk-a1
    base_url: http://127.0.0.1:${TEST_NGINX_MOCK_PORT}
keys:
  - key: admin-key
    name: ops
    admin: true
--- request
GET /healthz
--- error_code: 200
--- check
my ($st, $j) = admin(POST => '/admin/settings', { 'routing.strategy' => 'round_robin' });
is($st, 200, 'the strategy set');
is($j->{settings}{'routing.strategy'}{source}, 'runtime', 'at runtime');
($st, $j) = admin(POST => '/admin/keys', { name => 'scratch' });
is($st, 201, 'a key minted');
my $secret = $j->{key};
is(message_with($secret)->{status}, 200, 'and it works');
is(admin_get('/admin/status')->{store}{backend}, 'memory', 'the store: memory');
ok(!-e servroot() . '/html/tokenbiryani.db', 'no store file');
restart();
is(admin_get('/admin/settings')->{settings}{'routing.strategy'}{source}, 'default', 'after a restart: the strategy is the default again');
is(message_with($secret)->{status}, 401, 'and the key is gone');
