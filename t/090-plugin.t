# A routing strategy from another dynamic module.
use lib 't/lib';
use TB::Nginx;
use TB::Gateway;

master_on();
workers(2);
no_shuffle();
mock_start();

$ENV{TEST_NGINX_PLUGIN} //= 'build/ngx_http_tokenbiryani_example_strategy_module.so';
$ENV{TEST_NGINX_PLUGIN} = File::Spec->rel2abs($ENV{TEST_NGINX_PLUGIN});

our $Yaml = <<'_EOY_';
>>> tb.yaml
routing:
  strategy: ${TB_TEST_STRATEGY}
accounts:
  - id: a1
    api_key: sk-a1
    base_url: http://127.0.0.1:${TEST_NGINX_MOCK_PORT}
  - id: a2
    api_key: sk-a2
    base_url: http://127.0.0.1:${TEST_NGINX_MOCK_PORT2}
  - id: a3
    api_key: sk-a3
    base_url: http://127.0.0.1:${TEST_NGINX_MOCK_PORT3}
_EOY_

sub yaml_for { $::Yaml =~ s/\$\{TB_TEST_STRATEGY\}/$_[0]/r }

sub post {
    http_request(method => 'POST', path => '/v1/messages', body => $_[0]);
}


gateway_suite(yaml => $Yaml);
run_tests();

__DATA__

=== TEST 1: a plugin's own terms route requests, and the inspector shows them
--- main_config
load_module $TEST_NGINX_PLUGIN;
--- user_files eval: yaml_for('fewest_requests')
--- check
# new conversations go to whoever served the fewest: they spread evenly
my %n;
$n{ post(msg_body(text => "new $_"))->{headers}{'x-tokenbiryani-account'} }++ for 1 .. 9;
is_deeply([sort values %n], [3, 3, 3], 'nine new conversations, three each')
    or diag(explain(\%n));

# a conversation stays on its owner (the plugin's affinity term)
my $first = post(turn_body('c', 1))->{headers}{'x-tokenbiryani-account'};
is(post(turn_body('c', $_))->{headers}{'x-tokenbiryani-account'}, $first,
   "turn $_ on its owner") for 2 .. 4;

my $r = post(turn_body('c', 5));
my $rec = request_record($r);
is($rec->{decision}{strategy}, 'fewest_requests', 'the strategy');
my ($chosen) = grep { $_->{verdict} eq 'chosen' } @{ $rec->{decision}{candidates} };
is_deeply([sort keys %{ $chosen->{terms} }], ['affinity', 'requests'],
          "the plugin's term names");
is($chosen->{terms}{affinity}, 2, 'its affinity term');

my $st = json_decode(http_request(method => 'GET', path => '/admin/strategies')->{body});
my %s = map { $_->{name} => $_ } @{ $st->{strategies} };
ok($s{fewest_requests}{plugin} && $s{fewest_requests}{current}, 'listed, in force');
ok($s{sticky_frugal}{plugin}, 'the other plugin strategy too');
is($s{sticky_frugal}{multipliers}{cost}, 3, 'with its multipliers');
ok(!$s{sticky_headroom}{plugin}, 'built-ins are not plugins');



=== TEST 2: a plugin's multipliers
--- main_config
load_module $TEST_NGINX_PLUGIN;
--- user_files eval
my $y = yaml_for('sticky_frugal');
$y =~ s/(  - id: a2\n)/$1    cost_tier: 0.5\n/;
$y
--- check
is(post(msg_body(text => "n$_"))->{headers}{'x-tokenbiryani-account'}, 'a2',
   "new conversation $_ on the cheapest") for 1 .. 3;



=== TEST 3: without the plugin its strategy is unknown, and nginx -t says which exist
--- user_files eval: yaml_for('fewest_requests')
--- must_die
--- error_log
routing.strategy: unknown strategy "fewest_requests" (known: sticky_headroom, headroom, cost_tiered, priority, least_loaded, round_robin)



=== TEST 4: with it, the list names the plugin's strategies too
--- main_config
load_module $TEST_NGINX_PLUGIN;
--- user_files eval: yaml_for('fastest')
--- must_die
--- error_log
round_robin, sticky_frugal, fewest_requests)
