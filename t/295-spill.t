# The spill lane (batch.enabled): a batch-priority Message, not streamed,
# that finds the pool saturated with a known time to capacity is sent as a
# batch of one; the client gets the message as if it were answered at once,
# with x-tokenbiryani-via: batch and the batch's id, charged at the batch
# price.  Past its wait budget the batch is cancelled upstream (the mock
# sees the cancel) and the client gets a 429 naming it; a submission that
# fails goes back to the queue; interactive and streamed requests never
# spill.  Two workers, the real module, the mock's Batches API.
use lib 't/lib';
use TB::Nginx;
use TB::Gateway;
use Time::HiRes ();

master_on();
workers(2);
no_shuffle();
mock_start();

sub yaml_of {
    my ($batch, $account) = @_;
    main::pool_yaml(accounts => [{ id => 'a1', %{ $account // {} } }], yaml => "batch:\n$batch\npricing: builtin\n", keys => [
        { key => 'key-one', name => 'one', spend_cap_usd => '5' },
        { key => 'key-bg', name => 'bg', priority => 'batch', spend_cap_usd => '5' },
        { key => 'key-tiny', name => 'tiny', priority => 'batch', spend_cap_usd => '0.0000001' },
        { key => 'admin-key', name => 'admin', admin => 'true' }]);
}

our $On = yaml_of("  enabled: true\n  poll_interval_seconds: 0.05");

# the only account allows one request every few seconds: the first takes it
sub saturate {
    my ($secs) = @_;
    mock_config({ credentials => { 'sk-a1' => { requests_limit => 1, window_seconds => $secs } } });
    my $r = message_with('key-one');
    die "the first request: $r->{status}\n" unless $r->{status} == 200;
}

# a Message by key with headers of its own
sub msg {
    my ($key, %o) = @_;
    my $h = delete $o{headers} // {};
    my $a = message_args($key, %o);
    $a->{headers}{$_} = $h->{$_} for keys %$h;
    TB::Nginx::http_request(%$a);
}

sub spend { (grep { $_->{name} eq $_[0] } @{ pool_status()->{keys} })[0]{spend} }

sub batches_seen { [grep { ($_->{path} // '') =~ m{^/v1/messages/batches} } @{ mock_log($_[0]) }] }

gateway_suite(yaml => $On);
run_tests();

__DATA__

=== TEST 1: saturated, batch priority: served through a batch of one, as if answered at once, at the batch price
--- check
mock_config({ defaults => { batch_processing_ms => 150 } });
saturate(30);
my $from = scalar @{ mock_log() };
my $t0 = Time::HiRes::time();
my $r = msg('key-one', headers => { 'x-tokenbiryani-priority' => 'batch' });
my $took = Time::HiRes::time() - $t0;
is($r->{status}, 200, 'answered');
ok($took < 10, sprintf('in %.2f s, where the queue would have waited for the 30 s window', $took));
is($r->{headers}{'x-tokenbiryani-via'}, 'batch', 'x-tokenbiryani-via: batch');
like($r->{headers}{'x-tokenbiryani-batch-id'} // '', qr/^msgbatch_/, 'x-tokenbiryani-batch-id');
is($r->{headers}{'x-tokenbiryani-account'}, 'a1', 'x-tokenbiryani-account');
my $m = json_decode($r->{body});
is($m->{type}, 'message', 'the body is the message');
ok($m->{usage}{output_tokens} > 0, 'with its usage');
my $log = mock_log($from);
is(scalar(grep { ($_->{path} // '') eq '/v1/messages' } @$log), 0, 'no Message sent');
my @made = grep { ($_->{path} // '') eq '/v1/messages/batches' && $_->{method} eq 'POST' } @$log;
is(scalar @made, 1, 'one batch made');
my ($b) = grep { $_->{id} eq $r->{headers}{'x-tokenbiryani-batch-id'} } @{ TB::Nginx::_mock_call(GET => 'batches')->{batches} };
is($b->{request_counts}{succeeded}, 1, 'a batch of one');
my $want = ($b->{usage}{input_tokens} * 3000 + $b->{usage}{output_tokens} * 15000) / 2 / 1e9;
my $sp = spend('one');
my $first = $sp->{window_usd} - $want;
ok($want > 0 && $sp->{in_flight_usd} == 0, 'nothing held once answered');
my $rec = request_record($r);
ok(abs($rec->{cost}{usd} - $want) < 1e-12, "its record: the batch price (\$$rec->{cost}{usd} vs \$$want)");
diag(sprintf('spill: answered in %.2f s (window 30 s), $%.6f at the batch price, $%.6f at the Messages price',
             $took, $want, 2 * $want));
my (undef, $j) = admin(GET => '/admin/batches');
my ($kept) = grep { $_->{id} eq $b->{id} } @{ $j->{batches} };
ok($kept && $kept->{charged} && $kept->{key} eq 'one', 'one of its key\'s batches, charged');
ok(abs($kept->{charged_usd} - $want) < 1e-12, 'charged the batch price once');
my (undef, $ev) = admin(GET => '/admin/events?since=0&limit=1000');
my @told = grep { $_->{type} eq 'batch' && $_->{batch_id} eq $b->{id} } @{ $ev->{events} };
is_deeply([sort map { $_->{request_id} } @told], [map { $r->{headers}{'x-tokenbiryani-request-id'} } @told],
          '/admin/events: its batch\'s every stage by the spilled request');
ok((grep { $_->{stage} eq 'created' } @told) && (grep { $_->{stage} eq 'charged' } @told), 'made and charged');
# the key's default priority spills too
$r = message_with('key-bg');
is($r->{headers}{'x-tokenbiryani-via'}, 'batch', 'a key of batch priority spills without the header');
# the client's anthropic-beta goes with its batch, as with its Message
$from = scalar @{ mock_log() };
$r = msg('key-one', headers => { 'x-tokenbiryani-priority' => 'batch', 'anthropic-beta' => 'files-api-2025-04-14, context-1m-2025-08-07' });
is($r->{headers}{'x-tokenbiryani-via'}, 'batch', 'a request with betas spills');
my ($made) = grep { ($_->{path} // '') eq '/v1/messages/batches' && $_->{method} eq 'POST' } @{ mock_log($from) };
is($made->{headers}{'anthropic-beta'}, 'files-api-2025-04-14, context-1m-2025-08-07', 'its batch made with its anthropic-beta');
# one the gateway would not vouch for stays in the queue
$from = scalar @{ mock_log() };
$r = msg('key-one', headers => { 'x-tokenbiryani-priority' => 'batch', 'x-tokenbiryani-max-wait' => '1', 'anthropic-beta' => "caf\xc3\xa9" });
isnt($r->{headers}{'x-tokenbiryani-via'} // '', 'batch', 'a beta not printable ASCII: not spilled');
is(scalar @{ batches_seen($from) }, 0, 'no batch made');



=== TEST 2: interactive requests and streams never spill
--- check
mock_config({ defaults => { batch_processing_ms => 50 } });
saturate(3);
my $from = scalar @{ mock_log() };
my $r = msg('key-one', headers => { 'x-tokenbiryani-max-wait' => '10' });
is($r->{status}, 200, 'interactive: answered');
ok(!defined $r->{headers}{'x-tokenbiryani-via'}, 'not through a batch');
saturate(3);
$r = msg('key-one', stream => 1, headers => { 'x-tokenbiryani-priority' => 'batch', 'x-tokenbiryani-max-wait' => '10' });
is($r->{status}, 200, 'a batch-priority stream: answered');
ok(!defined $r->{headers}{'x-tokenbiryani-via'}, 'not through a batch');
is(scalar @{ batches_seen($from) }, 0, 'no batch made');



=== TEST 3: past its wait budget: the batch cancelled upstream, a 429 naming it
--- check
mock_config({ defaults => { batch_processing_ms => 20000 } });
saturate(30);
my $from = scalar @{ mock_log() };
my $t0 = Time::HiRes::time();
my $r = msg('key-one', headers => { 'x-tokenbiryani-priority' => 'batch', 'x-tokenbiryani-max-wait' => '1' });
my $took = Time::HiRes::time() - $t0;
is($r->{status}, 429, 'refused: 429');
my $e = json_decode($r->{body});
is($e->{error}{type}, 'rate_limit_error', 'rate_limit_error');
my $id = $r->{headers}{'x-tokenbiryani-batch-id'} // '';
like($id, qr/^msgbatch_/, 'naming the batch');
like($e->{error}{message}, qr/batch \Q$id\E did not finish within this request's wait budget; it was cancelled upstream/, 'saying so');
ok($took >= 0.9 && $took < 5, sprintf('after its budget (%.2f s)', $took));
ok(poll_until(5, sub { grep { ($_->{path} // '') eq "/v1/messages/batches/$id/cancel" } @{ mock_log($from) } }),
   'the mock saw the cancel');



=== TEST 4: a submission that fails goes back to the queue, served when the account has room
--- check
mock_config({ batch_max_body_bytes => 10 });
saturate(2);
my $from = scalar @{ mock_log() };
my $r = msg('key-one', headers => { 'x-tokenbiryani-priority' => 'batch', 'x-tokenbiryani-max-wait' => '10' });
is($r->{status}, 200, 'answered');
ok(!defined $r->{headers}{'x-tokenbiryani-via'}, 'by the queue, not a batch');
my $log = mock_log($from);
ok((grep { ($_->{path} // '') eq '/v1/messages/batches' } @$log) >= 1, 'its batch was tried');
is(scalar(grep { ($_->{path} // '') eq '/v1/messages' && ($_->{status} // 0) == 200 } @$log), 1, 'then the Message sent once');
like(TB::Nginx::log_text(), qr/the spill lane gives the request back to the queue: its batch was not made/, 'the log says why');



=== TEST 5: off unless batch.enabled says so
--- user_files eval
main::yaml_of("  enabled: false")
--- check
saturate(2);
my $from = scalar @{ mock_log() };
my $r = msg('key-one', headers => { 'x-tokenbiryani-priority' => 'batch', 'x-tokenbiryani-max-wait' => '10' });
is($r->{status}, 200, 'answered by the queue');
ok(!defined $r->{headers}{'x-tokenbiryani-via'}, 'not through a batch');
is(scalar @{ batches_seen($from) }, 0, 'no batch made');



=== TEST 6: a key whose spend cap could not hold the batch's estimate does not spill
--- check
saturate(30);
my $from = scalar @{ mock_log() };
my $r = msg('key-tiny', headers => { 'x-tokenbiryani-max-wait' => '1' });
isnt($r->{headers}{'x-tokenbiryani-via'} // '', 'batch', 'not through a batch');
is($r->{status}, 429, 'refused');
is(scalar @{ batches_seen($from) }, 0, 'no batch made');



=== TEST 7: a client that leaves before its spilled batch ends: the gateway's own poll charges the batch
--- check
mock_config({ defaults => { batch_processing_ms => 1500 } });
saturate(30);
my $r = TB::Nginx::http_request(%{ message_args('key-one') }, timeout => 0.5,
                                headers => { %{ message_args('key-one')->{headers} }, 'x-tokenbiryani-priority' => 'batch' });
ok(!$r->{status} || $r->{status} != 200, 'the client gave up before the answer');
my $b;
ok(poll_until(10, sub { my (undef, $j) = admin(GET => '/admin/batches'); ($b) = @{ $j->{batches} }; $b && $b->{charged} }),
   'its batch charged all the same');
ok($b && $b->{charged_usd} > 0, "what it used (\$$b->{charged_usd})");
is(spend('one')->{in_flight_usd}, 0, 'nothing held');



=== TEST 8: an account whose spend cap could not hold the batch's estimate gets no batch: the request waits in the queue
--- user_files eval
main::yaml_of("  enabled: true\n  poll_interval_seconds: 0.05", { spend_cap_usd => '0.0001' })
--- check
saturate(30);
my $from = scalar @{ mock_log() };
my (undef, $st) = admin(GET => '/admin/accounts');
ok($st->{accounts}[0]{usage}{window_usd} >= 0.0001, "the account spent its cap (\$$st->{accounts}[0]{usage}{window_usd})");
my $r = msg('key-one', headers => { 'x-tokenbiryani-priority' => 'batch', 'x-tokenbiryani-max-wait' => '1' });
isnt($r->{headers}{'x-tokenbiryani-via'} // '', 'batch', 'not through a batch');
is($r->{status}, 429, 'refused once its budget is spent, as the queue does');
is(scalar @{ batches_seen($from) }, 0, 'no batch made');


=== TEST 9: enforcing pacing, the week ahead of its pace, the lane on: a batch-priority Message goes to the spill lane rather than being held back (prefer_batch_lane_when_ahead); with that off it is held back; interactive ones neither
--- user_files eval
main::yaml_of("  enabled: true\n  poll_interval_seconds: 0.05\nstore:\n  backend: sqlite\npacing:\n  mode: enforcing\n  weekly_budget_usd: 0.0001\n  max_batch_delay_seconds: 0.5\n")
--- check
mock_config({ defaults => { batch_processing_ms => 50 } });
# the week's budget spent many times over by an interactive request
is(message_with('key-one')->{status}, 200, 'an interactive request spends the week');
my $j;
ok(poll_until(10, sub { (undef, $j) = admin(GET => '/admin/pacing'); ref $j->{enforced} && $j->{enforced}{week_used_usd} > 0.0001 }),
   'the pacer has read it') or diag(json_encode($j));
my $from = scalar @{ mock_log() };
my $r = msg('key-one', headers => { 'x-tokenbiryani-priority' => 'batch' });
is($r->{status}, 200, 'a batch-priority request, the pool not saturated: answered');
is($r->{headers}{'x-tokenbiryani-via'}, 'batch', 'through the spill lane');
my $rec = request_record($r);
is($rec->{paced_for_ms}, 0, 'not held back');
is(scalar(grep { ($_->{path} // '') eq '/v1/messages' } @{ mock_log($from) }), 0, 'no Message sent');
is(scalar(grep { ($_->{path} // '') eq '/v1/messages/batches' && $_->{method} eq 'POST' } @{ mock_log($from) }), 1, 'one batch made');
like(TB::Nginx::log_text(), qr/\Q$rec->{request_id}\E: sent to the batch lane, the pool's weekly budget being ahead of its pace/, 'said at info');
$r = message_with('key-one');
ok(!$r->{headers}{'x-tokenbiryani-via'} || $r->{headers}{'x-tokenbiryani-via'} ne 'batch', 'an interactive request: sent as it came');
is(request_record($r)->{paced_for_ms}, 0, '... and not held back');
# a stream of batch priority is held back, never spilled
my $a = message_args('key-one', stream => 1);
$a->{headers}{'x-tokenbiryani-priority'} = 'batch';
$r = TB::Nginx::http_request(%$a);
is($r->{status}, 200, 'a batch-priority stream: answered');
is(request_record($r)->{paced_for_ms}, 500, '... held back, not spilled');


=== TEST 10: the same with pacing.prefer_batch_lane_when_ahead false: held back, not spilled
--- user_files eval
main::yaml_of("  enabled: true\n  poll_interval_seconds: 0.05\nstore:\n  backend: sqlite\npacing:\n  mode: enforcing\n  weekly_budget_usd: 0.0001\n  max_batch_delay_seconds: 0.5\n  prefer_batch_lane_when_ahead: false\n")
--- check
is(message_with('key-one')->{status}, 200, 'an interactive request spends the week');
my $j;
ok(poll_until(10, sub { (undef, $j) = admin(GET => '/admin/pacing'); ref $j->{enforced} && $j->{enforced}{week_used_usd} > 0.0001 }),
   'the pacer has read it') or diag(json_encode($j));
my $r = msg('key-one', headers => { 'x-tokenbiryani-priority' => 'batch' });
is($r->{status}, 200, 'answered');
isnt($r->{headers}{'x-tokenbiryani-via'} // '', 'batch', 'not through the spill lane');
is(request_record($r)->{paced_for_ms}, 500, 'held back');
