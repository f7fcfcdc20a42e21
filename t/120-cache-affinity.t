# The cache-affinity benchmark, small, as a test: the same workload through
# the real gateway once per strategy (t/bench/cache_affinity.py, which
# starts its own nginx with 2 workers and the mock).  It fails if
# sticky_headroom stops beating every cache-blind strategy on cost, breaks
# a conversation's cache while capacity suffices, or bills different input
# for the same work.
use strict;
use warnings;
use Test::More;
use JSON::PP ();

my $module = (split ' ', $ENV{TEST_NGINX_LOAD_MODULES} // '')[0]
    or plan skip_all => 'TEST_NGINX_LOAD_MODULES names no module';

my $out = `/usr/bin/python3 t/bench/cache_affinity.py --module '$module' --accounts 3 --conversations 12 --turns 4 --strategies sticky_headroom,headroom,least_loaded,round_robin --workdir t/servroot-bench --json 2>&1`;
is($?, 0, 'the benchmark ran') or diag($out);
my $res = eval { JSON::PP->new->decode($out) } or BAIL_OUT("no JSON: $out");

my %row = map { $_->{strategy} => $_ } @{ $res->{rows} };
my $sticky = $row{sticky_headroom};
my $oracle = $res->{oracle};

for my $r (@{ $res->{rows} }) {
    is($r->{requests}, 48, "$r->{strategy}: every turn served");
    is($r->{upstream_attempts}, 48, "$r->{strategy}: one attempt each");
    is_deeply($r->{nginx_errors}, [], "$r->{strategy}: nginx logged no alert");
    is($r->{billed_input}, $sticky->{billed_input},
       "$r->{strategy}: the same work ($r->{billed_input} input tokens)");
}

for my $s (qw(headroom least_loaded round_robin)) {
    ok($sticky->{cost} < $row{$s}{cost},
       sprintf('sticky $%.4f beats %s $%.4f (%.2fx)', $sticky->{cost}, $s,
               $row{$s}{cost}, $row{$s}{cost} / $sticky->{cost}));
}

is($sticky->{forced_breaks}, 0, 'sticky: no forced break, capacity sufficing');
is($sticky->{broken}, 0, 'sticky: no conversation moved off its cache');
ok(abs($sticky->{cost} - $oracle->{cost}) < 1e-9,
   sprintf('sticky at the oracle cost ($%.4f vs $%.4f)', $sticky->{cost}, $oracle->{cost}));

done_testing();
