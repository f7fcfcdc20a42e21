# The console in a real browser: Debian's chromium, headless, driven over
# the DevTools protocol (t/console/drive.mjs, puppeteer-core from npm),
# against a real gateway (2 workers) and the mock.  Every page renders with
# live data, with no console error, no failed request and no request to any
# other host; a wrong key is told so; minting shows the key once and it
# works, revoking makes it fail; the first-run flow on an empty pool ends
# in export lines whose key works with curl; the quickstart (init, serve
# -d, console) signs in through a one-time ticket; phone width, keyboard,
# open mode.  With TB_CONSOLE_SHOTS=DIR, it saves a screenshot of every
# page there (make console-shots: docs/console/).
use utf8;
use lib 't/lib';
use TB::Nginx;
use TB::Gateway;
use IPC::Open2 ();
use Cwd ();

binmode(Test::More->builder->$_, ':encoding(UTF-8)') for qw(output failure_output todo_output);

master_on();
workers(2);
no_shuffle();
mock_start();
$ENV{TEST_NGINX_DEAD_PORT} ||= 19109;     # nothing listens there

our $Node = $ENV{TB_NODE} // 'node';
our $Cli = $ENV{TEST_NGINX_CLI} || Cwd::abs_path('build/tokenbiryani');
our $Shots = $ENV{TB_CONSOLE_SHOTS};
our ($DrvIn, $DrvOut, $DrvPid);

our $Yaml = <<'_EOY_';
>>> tb.yaml
server:
  allow_private_hosts: true     # the mock is on loopback
store:
  backend: sqlite
pricing: builtin
batch:
  api: true
pacing:
  weekly_budget_usd: 100
  # the week's verdict would turn "behind" once a tenth of the week has
  # gone with nothing spent, whatever day the suite runs on: the pages
  # are checked here, the verdicts at fixed times in t/unit/test_pacing.c
  behind_threshold: 1
accounts:
  - id: a1
    name: primary
    api_key: sk-a1
    base_url: http://127.0.0.1:${TEST_NGINX_MOCK_PORT}
  - id: a2
    name: overflow
    api_key: sk-a2
    base_url: http://127.0.0.1:${TEST_NGINX_MOCK_PORT2}
keys:
  - key: admin-key
    name: ops
    admin: true
  - key: tenant-key
    name: tenant
_EOY_

# the browser: one for the whole file, a fresh profile per "open"
sub drv {
    my ($op, %a) = @_;
    unless ($DrvPid) {
        $DrvPid = IPC::Open2::open2($DrvOut, $DrvIn, $Node, 't/console/drive.mjs');
        $DrvIn->autoflush(1);
    }
    print {$DrvIn} json_encode({ op => $op, %a }) . "\n";
    my $line = <$DrvOut>;
    die "the browser's driver stopped\n" unless defined $line;
    json_decode($line);
}

# a step that must work: its value, or a failed test that says why
sub step {
    my ($name, $op, %a) = @_;
    my $r = drv($op, %a);
    ok($r->{ok}, $name) or diag($r->{error});
    $r->{value};
}

sub base { "http://127.0.0.1:" . ($_[0] // server_port()) }

sub visit {
    my ($hash, $js, $name) = @_;
    step("$name: the page", eval => js => "location.hash = " . json_encode($hash));
    step("$name: shows live data", wait => js => $js);
}

sub shot {
    my ($name, %o) = @_;
    return unless $Shots;
    drv(shot => path => "$Shots/$name.png", full => $o{full} // 1);
}

# what the page did since the last call: no console error, no failed
# request but those %o{allow} expects, nothing sent to another origin
sub clean {
    my ($name, %o) = @_;
    my $r = step("$name: the report", 'report');
    my @failed = grep { my $f = $_; !grep { $f =~ $_ } @{ $o{allow} // [] } } @{ $r->{failed} };
    my @errors = grep { my $f = $_; !grep { $f =~ $_ } @{ $o{allow} // [] } } @{ $r->{errors} };
    is_deeply(\@errors, [], "$name: no console error");
    is_deeply(\@failed, [], "$name: no failed request");
    is_deeply($r->{foreign}, [], "$name: no request to any other host");
    ok($r->{requests} > 0, "$name: it did talk to the gateway");
}

# the first run's form, filled for an API key at $port's mock, up to
# "Test and add" (the caller tests, and says what it expects)
sub fill_account_form {
    my ($name, $credential, $port) = @_;
    step('an API key', click => text => 'Anthropic API key');
    step('the form', wait => js => text_has('Test and add'));
    step('a name', type => sel => 'main form .field:nth-child(1) input', text => $name);
    step('the key', type => sel => 'main input[type=password]', text => $credential);
    step('advanced', click => sel => 'main details summary');
    step('its base URL', eval => js => "(() => { const i = [...document.querySelectorAll('main details input')][1]; i.value = 'http://127.0.0.1:$port'; })()");
}

# the export lines the page shows: (base URL, key)
sub export_lines {
    my $lines = step('export lines', wait => js => "document.querySelector('[data-export]') && document.querySelector('[data-export]').textContent");
    ($lines =~ /^export ANTHROPIC_BASE_URL=(\S+)$/m, $lines =~ /^export ANTHROPIC_AUTH_TOKEN=(\S+)$/m);
}

sub sign_in {
    my ($key) = @_;
    step('the console', open => url => base() . '/console/');
    step('asks for a key', wait => js => "!document.getElementById('gate').hidden");
    step('typed', type => sel => '#gate-key', text => $key);
    step('sign in', click => sel => '#gate-form button');
}

# the text of the page, as the user reads it
# (a JS string literal of characters: the command line is UTF-8 encoded once, later)
sub js_str { JSON::PP->new->ascii->allow_nonref->encode($_[0]) }
sub text_has { "document.querySelector('main') && document.querySelector('main').textContent.includes(" . js_str($_[0]) . ")" }

sub curl_status {
    my ($base, $key) = @_;
    my $out = `curl -s -o /dev/null -w '%{http_code}' $base/v1/messages -H 'x-api-key: $key' -H 'anthropic-version: 2023-06-01' -H 'content-type: application/json' -d '{"model":"claude-sonnet-4-6","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}'`;
    $out;
}

END { if ($DrvPid) { print {$DrvIn} qq({"op":"quit"}\n); waitpid($DrvPid, 0) } }

# every block ends with its page closed: the browser's open connections
# would otherwise hold nginx's graceful stop until their timeout
add_block_preprocessor(sub {
    my $b = shift;
    $b->set_value(check => $b->check . "\ndrv('close') if \$DrvPid;\n") if defined $b->check;
});

gateway_suite(yaml => $Yaml, config => $TB::Gateway::Locations . "    location /console { tokenbiryani_console; }\n");
run_tests();

__DATA__

=== TEST 1: the page's files: no key needed, a strict policy, no data in them; /console is /console/
--- request
GET /console/
--- check
is($resp->{status}, 200, 'the page');
like($resp->{headers}{'content-type'}, qr{^text/html}, 'HTML');
my $csp = $resp->{headers}{'content-security-policy'} // '';
like($csp, qr/default-src 'none'/, 'nothing by default');
like($csp, qr/script-src 'self';/, 'scripts from the gateway only, none inline');
like($csp, qr/style-src 'self';/, 'styles likewise');
like($csp, qr/connect-src 'self';/, 'and it talks to the gateway only');
like($csp, qr/frame-ancestors 'none'/, 'never framed');
is($resp->{headers}{'x-content-type-options'}, 'nosniff', 'nosniff');
unlike($resp->{body}, qr/<script>|\sstyle="|\son\w+="/, 'no inline script, style or handler');
unlike($resp->{body}, qr/https?:\/\//, 'no address of another host');
for my $f (['console.js', qr{^text/javascript}], ['console-dom.js', qr{^text/javascript}], ['console.css', qr{^text/css}], ['icon.svg', qr{^image/svg\+xml}]) {
    my $r = TB::Nginx::http_request(path => "/console/$f->[0]");
    is($r->{status}, 200, "$f->[0]");
    like($r->{headers}{'content-type'}, $f->[1], "$f->[0]: its type");
    is($r->{headers}{'x-content-type-options'}, 'nosniff', "$f->[0]: nosniff");
    # the SVG namespace is a name, and the upstream's address a placeholder
    # of the base URL field: neither is an address anything is fetched from
    (my $b = $r->{body}) =~ s{http://www\.w3\.org/2000/svg|placeholder: 'https://api\.anthropic\.com'}{}g;
    unlike($b, qr{https?://}, "$f->[0]: names no other host");
}
my $r = TB::Nginx::http_request(path => '/console');
is($r->{status}, 301, '/console');
is($r->{headers}{location}, '/console/', 'to /console/');
is(TB::Nginx::http_request(path => '/console/nothing.js')->{status}, 404, 'nothing else');
is(TB::Nginx::http_request(method => 'POST', path => '/console/', body => 'x')->{status}, 405, 'GET only');
$r = TB::Nginx::http_request(path => '/console/mode');
is_deeply(json_decode($r->{body}), { open => JSON::PP::false() }, 'mode: the gateway has keys, nothing more');
$r = TB::Nginx::http_request(method => 'POST', path => '/console/ticket', body => '{"ticket":"00000000000000000000000000000000"}',
                             headers => { 'content-type' => 'application/json' });
is($r->{status}, 400, 'a ticket nobody made');
$r = TB::Nginx::http_request(method => 'POST', path => '/console/ticket', body => '{"ticket":"x"}',
                             headers => { 'content-type' => 'application/json', origin => 'http://evil.example' });
is($r->{status}, 403, 'another site\'s page may not redeem one');
$r = TB::Nginx::http_request(method => 'POST', path => '/console/ticket', body => '{"ticket":"' . ('0' x 2000) . '"}',
                             headers => { 'content-type' => 'application/json' });
is($r->{status}, 413, 'a body bigger than a ticket is refused before it is read');
like($r->{body}, qr/"type":"request_too_large"/, 'in Anthropic\'s shape');
is(TB::Nginx::http_request(path => '/consoleconsole.js')->{status}, 404, '/console is a directory, not a prefix of names');
is(TB::Nginx::http_request(path => '/console-x/')->{status}, 404, 'nor of other paths');
# made by an admin, redeemed once: the key that made it, and nothing for a tenant
my (undef, $made) = admin(POST => '/admin/console-ticket', {});
like($made->{ticket}, qr/^[0-9a-f]{32}$/, 'a ticket');
is((admin(POST => '/admin/console-ticket', {}, key => 'tenant-key'))[0], 403, 'a tenant key makes none');
$r = TB::Nginx::http_request(method => 'POST', path => '/console/ticket', body => qq({"ticket":"$made->{ticket}"}),
                             headers => { 'content-type' => 'application/json', origin => 'http://localhost', 'sec-fetch-site' => 'same-origin' });
is($r->{status}, 200, 'redeemed from the console\'s own origin') or diag($r->{body});
is(json_decode($r->{body})->{key}, 'admin-key', 'for the key that made it');



=== TEST 2: a wrong key and a tenant key are refused, clearly; an admin key signs in; sign-out forgets it
--- request
GET /healthz
--- check
sign_in('sk-ant-api03-not-this-gateways');
step('an Anthropic key: told what the gate wants', wait => js => "document.getElementById('gate-error').textContent.includes('That is an Anthropic API key')");
is(drv(eval => js => "localStorage.getItem('tokenbiryani.key')")->{value}, undef, 'not kept');
my $rep = drv('report')->{value};
is(scalar(grep { m{/admin/} } @{ $rep->{failed} }), 0, 'and never sent');
sign_in('not-a-key');
step('a wrong key: told so', wait => js => "document.getElementById('gate-error').textContent.includes('This key was refused')");
like(drv(eval => js => "document.getElementById('gate-error').textContent")->{value}, qr/invalid x-api-key|refused/, 'in words');
is(drv(eval => js => "localStorage.getItem('tokenbiryani.key')")->{value}, undef, 'and not kept');
shot('sign-in', full => 0);
clean('a wrong key', allow => [qr{/admin/status 401}, qr/status of 401/]);
step('a tenant key', type => sel => '#gate-key', text => 'tenant-key');
step('sign in', click => sel => '#gate-form button');
step('a tenant key: not an admin key', wait => js => "document.getElementById('gate-error').textContent.includes('not an admin key')");
clean('a tenant key', allow => [qr{/admin/status 403}, qr/status of 403/]);
step('the admin key', type => sel => '#gate-key', text => 'admin-key');
step('sign in', click => sel => '#gate-form button');
step('signed in', wait => js => text_has('Overview'));
is(drv(eval => js => "localStorage.getItem('tokenbiryani.key')")->{value}, 'admin-key', 'kept in this browser');
is(drv(eval => js => "location.href.includes('admin-key')")->{value}, JSON::PP::false(), 'never in the URL');
step('sign out', click => sel => '#signout');
step('the key is gone', wait => js => "!document.getElementById('gate').hidden && localStorage.getItem('tokenbiryani.key') === null");
clean('signed in and out');
my $log = TB::Nginx::slurp(TB::Nginx::servroot() . '/logs/access.log');
unlike($log, qr/admin-key|tenant-key|not-a-key/, 'no key in the access log (a key in a URL would be)');



=== TEST 3: every page with live data: no console error, no failed request, nothing from another host
--- request
GET /healthz
--- check
# traffic: plain answers, a failover (529 then 200), a conversation of turns
for my $i (1 .. 6) {
    is(message_with('tenant-key', text => "warm $i")->{status}, 200, "request $i");
}
my $r = TB::Nginx::http_request(%{ message_args('tenant-key', text => 'fails over') },
    headers => { %{ message_args('tenant-key')->{headers} }, 'x-mock-script' => '529,ok', 'x-mock-script-id' => 'fo1' });
is($r->{status}, 200, 'a request that failed over');
my $failover = $r->{headers}{'x-tokenbiryani-request-id'};
ok(TB::Nginx::poll_until(5, sub { my ($s, $u) = admin(GET => '/admin/usage?range=1h'); $u && $u->{totals}{requests} >= 7 }),
   'the history has them');
ok(TB::Nginx::poll_until(5, sub { my ($s) = admin(GET => "/admin/requests/$failover"); $s == 200 }), 'the inspector has it');

sign_in('admin-key');
step('the overview', wait => js => text_has('Yes, a request can go now'));
step('its accounts with meters', wait => js => "document.querySelectorAll('main .meters').length === 2");
step('its horizon', wait => js => "document.querySelectorAll('main svg.chart rect').length === 13");
step('its live feed', wait => js => "document.querySelectorAll('.feed li[tabindex]').length >= 7");
like(drv(eval => js => "document.querySelector('.feed').textContent")->{value}, qr/529 overloaded/, 'the failed attempt in the feed');
shot('overview');
clean('overview');

visit('#/accounts', text_has('file · locked') . " && " . text_has('primary'), 'accounts');
shot('accounts');
# one meaning of spend: the API's figure, labelled with its window
my (undef, $acs) = admin(GET => '/admin/accounts');
my $cells = drv(eval => js => "(() => { const t = document.querySelector('main table'); const i = [...t.querySelectorAll('th')].findIndex(th => th.textContent === 'Spend, 24 h'); return i < 0 ? null : Object.fromEntries([...t.querySelectorAll('tbody tr')].map(tr => [tr.cells[0].textContent.replace(/(primary|overflow)\$/, ''), tr.cells[i].textContent])); })()")->{value};
ok($cells, 'a spend column that says its window');
for my $a (@{ $acs->{accounts} }) {
    my $n = $a->{usage}{window_usd};
    my $want = $n == 0 ? '$0.00' : abs($n) < 0.01 ? sprintf('$%.4f', $n) : sprintf('$%.2f', $n);
    is($cells->{$a->{id}}, $want, "$a->{id}: $want, as the API and the command say");
}
visit('#/accounts/a1', text_has('What the meters can and cannot tell') . " && document.querySelectorAll('main table').length === 3", 'an account');
like(drv(eval => js => "document.querySelector('main').textContent")->{value}, qr/from the YAML file/, 'where its credential came from');
shot('account');
visit('#/usage', "document.querySelectorAll('main svg.chart').length === 3 && document.querySelectorAll('main svg.chart rect').length > 0 && " . text_has('Totals by account'), 'usage');
my $rows = drv(eval => js => "[...document.querySelectorAll('main table tbody tr')].map(tr => tr.textContent)")->{value};
ok((grep { /^a[12]/ } @$rows) >= 1 && (grep { /^All/ } @$rows) == 1, 'the totals table: by account, and all') or diag(explain($rows));
step('grouped by model', eval => js => "(() => { const s = document.querySelector('main select'); s.value = 'model'; s.dispatchEvent(new Event('change')); })()");
step('by model', wait => js => text_has('Totals by model') . " && " . text_has('claude-sonnet-4-6'));
shot('usage');
visit('#/requests', "document.querySelectorAll('main tr.link').length >= 7", 'requests');
shot('requests');
visit("#/requests/$failover", text_has('Routing decision') . " && document.querySelectorAll('.chain .hop').length === 5", 'the inspector');
like(drv(eval => js => "document.querySelector('.chain').textContent")->{value}, qr/^a[12]→529 overloaded \(\d+ ms\)→⏱ \d+ ms→a[12]→200 \(\d+ ms\)$/,
     'the attempt chain, with the time between the attempts');
my $att = drv(eval => js => "[...document.querySelectorAll('main table')][0].textContent")->{value};
like($att, qr/^AttemptAccountChosen amongScoreWaited before itAnswer1a[12]2 eligible\d\.\d{4}—529 overloaded \(\d+ ms\)2a[12]1 eligible\d\.\d{4}\d+ ms200 ok \(\d+ ms\)$/,
     'every attempt\'s decision and the wait before it') or diag($att);
step('the candidates with verdicts and terms', wait => js => text_has('chosen') . ' && ' . text_has('headroom'));
shot('request');
# a batch, for the efficiency page's list of them
my $br = TB::Nginx::http_request(method => 'POST', path => '/v1/messages/batches',
    headers => { %{ message_args('tenant-key')->{headers} } },
    body => json_encode({ requests => [{ custom_id => 'c1', params => { model => 'claude-sonnet-4-6', max_tokens => 5,
                                                                      messages => [{ role => 'user', content => 'hi' }] } }] }));
is($br->{status}, 200, 'a batch made');
my $bid = substr(json_decode($br->{body})->{id} =~ s/^msgbatch_//r, 0, 12);
visit('#/efficiency', text_has('claude-sonnet-4-6') . " && " . text_has('The costliest conversations') . " && " . text_has($bid)
      . " && document.querySelectorAll('main table').length === 6", 'efficiency');
like(drv(eval => js => "[...document.querySelectorAll('main table')].pop().textContent")->{value},
     qr/\Q$bid\E….*tenant.*a[12]in progress0 of 1\$0\.\d+not yet/, 'the batch: its key, account, state, counts, hold');
# will the budget last: the week's reading, in the gateway's words
like(drv(eval => js => "[...document.querySelectorAll('main .card')].find(c => c.textContent.startsWith('Will the budget last?')).textContent")->{value},
     qr/^Will the budget last\?on pace: 0% of the pool's \$100\.00 weekly budget used, \d+% expected by now.*The budget week starts monday 00:00 \(\+00:00\); pacing is advisory\..*the pool's week\$0\.\d+ of \$100\$0\.\d+\/hon pace/,
     'the pace card: the tightest said, the week, the reading') ;
# is the prompt cache used: by key and model, from the inspector
like(drv(eval => js => "[...document.querySelectorAll('main .card')].find(c => c.textContent.startsWith('Is the prompt cache used?')).textContent")->{value},
     qr/tenantclaude-sonnet-4-6\d+0%\d+0%(no cache_control, and the stable prefix is about \d+ tokens: under 1024, too small to cache - nothing to fix here|\d+ of the 20 answers a verdict waits for)/,
     'the cache card: the tenant\'s prompts, no breakpoint, too small (or not enough yet)');
shot('efficiency');
# and in the overview's live feed: made, on its account, what it holds
my $full = json_decode($br->{body})->{id};
my $shown = length($full) > 18 ? substr($full, 0, 18) . '…' : $full;
visit('#/overview', text_has("batch $shown created"), 'the batch in the live feed');
like(drv(eval => js => "document.querySelector('.feed').textContent")->{value},
     qr/batch \Q$shown\E created · in progress, 1 request, holds \$0\.\d+ on a[12]/, 'its state, counts, hold and account');
visit('#/keys', text_has('tenant') . " && " . text_has('Mint a key'), 'keys');
shot('keys');
visit('#/settings', text_has('routing.strategy') . " && " . text_has('round_robin'), 'settings');
shot('settings');
# a YAML file broken by hand, reloaded from the page: said once
my $yaml = TB::Nginx::servroot() . '/html/tb.yaml';
my $good = TB::Nginx::slurp($yaml);
TB::Nginx::spew($yaml, $good . "  - id: [broken\n");
step('reload', click => text => 'Reload the YAML file', within => 'main');
my $said = step('refused, said', wait => js => "(() => { const b = document.querySelector('main .banner.bad'); return b && b.textContent; })()");
is(scalar(() = $said =~ /nothing was changed/gi), 1, "said once: $said");
TB::Nginx::spew($yaml, $good);
clean('a broken reload', allow => [qr{/admin/reload 400}, qr/status of 400/]);
visit('#/connect', text_has('Mint a key for this client'), 'connect');
shot('connect');
visit('#/welcome', text_has('Which credential?'), 'add an account');
clean('every page');



=== TEST 4: keys: a key minted in the page is shown once and works; revoked there, it fails; rescoped, it is out of scope
--- request
GET /healthz
--- check
sign_in('admin-key');
step('signed in', wait => js => text_has('Overview'));
step('keys', eval => js => "location.hash = '#/keys'");
step('the form', wait => js => text_has('Mint a key'));
step('a name', type => sel => 'main form input', text => 'browser-bot');
step('mint', click => text => 'Mint', within => 'main form');
my $secret = step('its secret, once', wait => js => "document.querySelector('[data-secret]') && document.querySelector('[data-secret]').textContent");
like($secret, qr/^bir_[A-Za-z0-9_-]{43}$/, 'a key');
like(drv(eval => js => "document.querySelector('.secret').textContent")->{value}, qr/export ANTHROPIC_AUTH_TOKEN=\Q$secret\E/, 'with its export lines');
shot('key-minted', full => 0);
is(curl_status(base(), $secret), '200', 'it works (curl)');
step('listed', wait => js => "[...document.querySelectorAll('main tbody tr')].some(tr => tr.textContent.startsWith('browser-bot'))");
step('the page again', eval => js => "location.reload()");
step('signed in still', wait => js => text_has('Mint a key') . " && " . text_has('browser-bot'));
is(drv(eval => js => "document.documentElement.innerHTML.includes(" . js_str($secret) . ")")->{value}, JSON::PP::false(), 'never shown again');
step('rescope', click => text => 'Rescope', within => 'main tbody');
step('a dialog', wait => js => "document.getElementById('dialog').open");
step('models', eval => js => "(() => { const i = document.querySelector('#dialog input'); i.value = 'gpt-*'; })()");
step('save', click => text => 'Save', within => '#dialog');
step('saved', wait => js => text_has('browser-bot rescoped'));
is(curl_status(base(), $secret), '403', 'out of its scope now');
step('revoke', click => text => 'Revoke', within => 'main tbody');
step('asks first', wait => js => "document.getElementById('dialog').open");
step('revoke it', click => text => 'Revoke', within => '#dialog');
step('revoked', wait => js => text_has('browser-bot revoked'));
is(curl_status(base(), $secret), '401', 'refused now (curl)');
# who still uses a dead key: seen by its name, in the live feed and on the keys page
step('the overview', eval => js => "location.hash = '#/overview'");
step('the refusal in the live feed, by key name', wait => js => "document.querySelector('.feed') && document.querySelector('.feed').textContent.includes('401 key revoked · key browser-bot')");
step('keys', eval => js => "location.hash = '#/keys'");
step('the revoked keys, still sent', wait => js => "(() => { const h = [...document.querySelectorAll('main h2')].find(x => x.textContent === 'Revoked'); return h && " . text_has('1 times') . "; })()");
like(drv(eval => js => "[...document.querySelectorAll('main table')][1].textContent")->{value}, qr/^NameRevokedStill sentLast sentbrowser-bot.+1 times/, 'browser-bot, revoked, sent once since');
unlike(drv(eval => js => "document.documentElement.innerHTML")->{value}, qr/\Q$secret\E/, 'its secret nowhere on the page');
like(drv(eval => js => "document.querySelector('main table').textContent")->{value}, qr/Last used/, 'the keys say when each was last used');
# minted and revoked at once: its secret leaves the screen with it
step('a name', type => sel => 'main form input', text => 'short-lived');
step('mint', click => text => 'Mint', within => 'main form');
step('its secret', wait => js => "document.querySelector('[data-secret]') !== null");
step('listed', wait => js => "[...document.querySelectorAll('main tbody tr')].some(tr => tr.textContent.startsWith('short-lived'))");
step('revoke', eval => js => "[...document.querySelectorAll('main tbody tr')].find(tr => tr.textContent.startsWith('short-lived')).querySelector('button.danger').click()");
step('asks first', wait => js => "document.getElementById('dialog').open");
step('revoke it', click => text => 'Revoke', within => '#dialog');
step('revoked', wait => js => text_has('short-lived revoked'));
is(drv(eval => js => "document.querySelector('[data-secret]')")->{value}, undef, 'its secret card gone');
# the connect page, twice in a day: two keys, no name taken twice
step('connect', eval => js => "location.hash = '#/connect'");
step('its form', wait => js => text_has('Mint a key for this client'));
my @names;
for my $n (1, 2) {
    step("mint $n", click => text => 'Mint a key for this client', within => 'main');
    push @names, step("minted $n", wait => js => "(() => { const c = document.querySelector('main .secret'); return c && !(window.__seen || []).includes(c.dataset.keyName) ? ((window.__seen = (window.__seen || []).concat([c.dataset.keyName])), c.dataset.keyName) : null; })()");
}
isnt($names[0], $names[1], "two names ($names[0], $names[1])");
is(drv(eval => js => "document.querySelector('main .error').textContent")->{value}, '', 'no 409');
clean('keys');



=== TEST 5: accounts: disabled and enabled from the page, tested with the header check
--- request
GET /healthz
--- check
is(message_with('tenant-key')->{status}, 200, 'a request (limits observed)');
sign_in('admin-key');
step('signed in', wait => js => text_has('Overview'));
step('accounts', eval => js => "location.hash = '#/accounts'");
step('listed', wait => js => text_has('primary'));
step('disable a2', click => text => 'Disable', within => 'main tbody tr:nth-child(2)');
step('disabled', wait => js => text_has('a2 disabled'));
my ($s, $st) = admin(GET => '/admin/accounts/a2');
is($st->{state}, 'disabled', 'the gateway says so');
is($st->{reason}, 'disabled by an operator', 'by an operator');
step('enable', click => text => 'Enable', within => 'main tbody tr:nth-child(2)');
step('enabled', wait => js => text_has('a2 enabled'));
($s, $st) = admin(GET => '/admin/accounts/a2');
is($st->{state}, 'ready', 'ready again');
step('test a1', click => text => 'Test', within => 'main tbody tr:nth-child(1)');
step('its result', wait => js => text_has('routing sees this account') . " && " . text_has('✓'));
clean('accounts');
# where the account is: its own page acts on it
visit('#/accounts/a2', text_has('What the meters can and cannot tell'), 'a2\'s page');
step('disable, there', click => text => 'Disable', within => 'main .page-head');
step('disabled', wait => js => text_has('a2 disabled'));
is((admin(GET => '/admin/accounts/a2'))[1]{state}, 'disabled', 'the gateway says so');
step('enable, there', click => text => 'Enable', within => 'main .page-head');
step('enabled', wait => js => text_has('a2 enabled') . " && document.querySelector('main .pill').textContent.includes('ready')");
step('test, there', click => text => 'Test', within => 'main .page-head');
step('its result', wait => js => text_has('a2: ') . " && " . text_has('✓'));
# a billing refusal waits for a person: said so, no countdown, and cleared from here
my $r = TB::Nginx::http_request(%{ message_args('tenant-key') },
    headers => { %{ message_args('tenant-key')->{headers} }, 'x-mock-script' => '402,ok', 'x-mock-script-id' => 'bill1' });
is($r->{status}, 200, 'a 402, failed over');
my $billed = $r->{headers}{'x-tokenbiryani-account'} eq 'a1' ? 'a2' : 'a1';
is((admin(GET => "/admin/accounts/$billed"))[1]{reason}, 'billing_error (402)', "$billed refused for billing");
visit("#/accounts/$billed", "document.querySelector('main .pill') && document.querySelector('main .pill').textContent.includes('needs billing action')", 'the billed account');
unlike(drv(eval => js => "document.querySelector('main .pill').textContent")->{value}, qr/\d:\d\d/, 'no countdown, as if it would heal itself');
step('clear it', click => text => 'Billing fixed: clear', within => 'main .page-head');
step('cleared', wait => js => text_has("$billed cleared") . " && document.querySelector('main .pill').textContent.includes('ready')");
# a rest the operator knows is over: retry now
$r = TB::Nginx::http_request(%{ message_args('tenant-key') },
    headers => { %{ message_args('tenant-key')->{headers} }, 'x-mock-script' => '429:300,ok', 'x-mock-script-id' => 'cool1' });
my $cooled = $r->{headers}{'x-tokenbiryani-account'} eq 'a1' ? 'a2' : 'a1';
visit("#/accounts/$cooled", "document.querySelector('main .pill') && document.querySelector('main .pill').textContent.includes('cooling')", 'the cooling account');
step('retry now', click => text => 'Retry now', within => 'main .page-head');
step('ready', wait => js => "document.querySelector('main .pill').textContent.includes('ready')");
is((admin(GET => "/admin/accounts/$cooled"))[1]{state}, 'ready', 'the gateway says so');
# its recent requests as wide as the page
my $w = drv(eval => js => "(() => { const c = [...document.querySelectorAll('main .card')].find(c => c.textContent.startsWith('Its recent requests')); return c.getBoundingClientRect().width / document.querySelector('main').clientWidth; })()")->{value};
ok($w > 0.9, "its recent requests full width ($w of the page)");
clean('an account\'s own page');
# a credential long enough to show its last four: as the API shows it
my ($code, $added) = admin(POST => '/admin/accounts', { id => 'a9', api_key => 'sk-ant-api03-long-enough-9876',
                                                         base_url => "http://127.0.0.1:$ENV{TEST_NGINX_MOCK_PORT3}" });
is($code, 201, 'an account added at runtime');
visit('#/accounts/a9', text_has('What the meters can and cannot tell'), 'a9\'s page');
my $masked = (admin(GET => '/admin/accounts/a9'))[1]{credential};
like($masked, qr/…9876$/, "the API shows its last four ($masked)");
like(drv(eval => js => "document.querySelector('main dl.kv').textContent")->{value}, qr/\Q$masked\E/, 'the page the same');
clean('a runtime account');



=== TEST 6: first run on an empty pool: add a credential, verify it with the header check, export lines whose key works with curl; no header observed is said as such
--- user_files
>>> tb.yaml
server:
  allow_private_hosts: true
store:
  backend: sqlite
pricing: builtin
keys:
  - key: admin-key
    name: ops
    admin: true
--- request
GET /healthz
--- error_code: 503
--- check
mock_config({ credentials => { 'sk-quiet' => { omit_headers => ['*'] } } });
sign_in('admin-key');
step('an empty pool opens the first run', wait => js => "location.hash === '#/welcome' && " . text_has('Welcome: add your first account'));
shot('first-run-1', full => 0);
fill_account_form('First account', 'sk-a1', $ENV{TEST_NGINX_MOCK_PORT});
shot('first-run-2', full => 0);
step('test and add', click => text => 'Test and add');
step('verified: the nine headers', wait => js => "document.querySelectorAll('main tbody tr').length === 9 && " . text_has('All nine headers came back'));
is(drv(eval => js => "document.querySelectorAll('main tbody .yes').length")->{value}, 9, 'nine ✓');
like(drv(eval => js => "document.querySelector('main').textContent")->{value}, qr/first-account was added/, 'the account, its id from its name');
shot('first-run-3', full => 0);
step('connect', click => text => 'Connect a client', within => 'main');
my ($base, $key) = export_lines();
is($base, base(), 'this gateway\'s own address');
like($key, qr/^bir_/, 'a key of its own');
is(drv(eval => js => "[...document.querySelectorAll('main pre')].filter(p => p.textContent.startsWith('export ')).length")->{value}, 1,
   'the export lines shown once, not twice');
shot('first-run-4', full => 0);
is(curl_status($base, $key), '200', 'the export lines work (curl)');
my ($s, $k) = admin(GET => '/admin/keys');
ok((grep { $_->{name} =~ /^first-client/ && !$_->{admin} } @{ $k->{keys} }) == 1, 'not an admin key');
# a credential whose answers carry no limit header
step('another', click => text => 'Add an account', within => '#nav');
fill_account_form('quiet', 'sk-quiet', $ENV{TEST_NGINX_MOCK_PORT2});
step('test and add', click => text => 'Test and add');
step('said honestly', wait => js => text_has('No rate-limit header came back yet'));
is(drv(eval => js => "document.querySelectorAll('main tbody .no').length")->{value}, 9, 'nine ✕');
# a credential the upstream refuses: not stored, and said
mock_config({ credentials => { 'sk-bad' => { behavior => '401' } } });
step('another', click => text => 'Add an account', within => '#nav');
fill_account_form('bad', 'sk-bad', $ENV{TEST_NGINX_MOCK_PORT3});
step('test and add', click => text => 'Test and add');
step('refused, said', wait => js => "document.querySelector('main .error').textContent.includes('the upstream refused this credential: 401')");
($s, my $a) = admin(GET => '/admin/accounts');
is_deeply([sort map { $_->{id} } @{ $a->{accounts} }], ['first-account', 'quiet'], 'the refused one was not stored');
clean('first run', allow => [qr{/admin/accounts 400}, qr/status of 400/]);
unlike(TB::Nginx::slurp(TB::Nginx::servroot() . '/logs/error.log') . TB::Nginx::slurp(TB::Nginx::servroot() . '/logs/access.log'),
       qr/sk-a1|sk-quiet|sk-bad|\Q$key\E/, 'no credential and no key in the logs');



=== TEST 7: the quickstart: init, serve -d, console - signed in by a one-time ticket, on the first-run page; the link works once
--- request
GET /healthz
--- check
my $dir = TB::Nginx::servroot() . '/own';
system('rm', '-rf', $dir);
mkdir $dir or die "$dir: $!";
chmod 0755, $dir;
my $port = server_port() + 9;
local %ENV = %ENV;
delete @ENV{qw(TOKENBIRYANI_URL TOKENBIRYANI_KEY ANTHROPIC_API_KEY ANTHROPIC_BASE_URL)};
my $here = Cwd::getcwd();
chdir $dir;
my $out = `$Cli init --listen 127.0.0.1:$port --allow-private-hosts 2>&1`;
is($?, 0, 'tokenbiryani init') or diag($out);
my ($initkey) = $out =~ /^export ANTHROPIC_AUTH_TOKEN=(\S+)$/m;
$out = `$Cli serve -d 2>&1`;
is($?, 0, 'tokenbiryani serve -d') or diag($out . TB::Nginx::slurp("$dir/.tokenbiryani/logs/error.log"));
$out = `$Cli console --no-browser 2>&1`;
chdir $here;
is($?, 0, 'tokenbiryani console') or diag($out);
my ($url) = $out =~ m{^(http://127\.0\.0\.1:$port/console/#ticket=[0-9a-f]{32})$}m;
ok($url, 'a URL with a ticket in its fragment') or diag($out);
step('the browser opens it', open => url => $url);
step('signed in, on the first-run page', wait => js => "location.hash === '#/welcome' && " . text_has('Welcome: add your first account'));
unlike(drv(eval => js => "location.href")->{value}, qr/ticket/, 'the ticket is gone from the address');
like(drv(eval => js => "localStorage.getItem('tokenbiryani.key')")->{value}, qr/^bir_[0-9a-f]{48}$/, 'the admin key init wrote, in this browser only');
clean('the quickstart', allow => []);
# on to a working export line, as a new user would
fill_account_form('mine', 'sk-a1', $ENV{TEST_NGINX_MOCK_PORT});
step('test and add', click => text => 'Test and add');
step('verified', wait => js => text_has('All nine headers came back'));
step('connect', click => text => 'Connect a client', within => 'main');
# init made a client key, and printed its export lines: no second one unasked
step('the client key init made, named', wait => js => text_has('This gateway has client key already: default') . ' && ' . text_has('Mint another key'));
is(drv(eval => js => "document.querySelectorAll('main [data-export]').length")->{value}, 0, 'no export lines for a key it did not mint');
my $keys = json_decode(TB::Nginx::http_request(method => 'GET', path => '/admin/keys', port => $port,
    headers => { 'x-api-key' => drv(eval => js => "localStorage.getItem('tokenbiryani.key')")->{value} })->{body})->{keys};
is(scalar(grep { !$_->{admin} } @$keys), 1, 'one client key, still');
is(curl_status("http://127.0.0.1:$port", $initkey), '200', 'the export lines init printed work (curl)');
# another, asked for: its export lines once
step('mint another', click => text => 'Mint another key', within => 'main');
my ($base, $key) = export_lines();
is($base, "http://127.0.0.1:$port", 'the quickstart gateway\'s address');
is(curl_status($base, $key), '200', 'its export lines work (curl)');
is(drv(eval => js => "[...document.querySelectorAll('main pre')].filter(p => p.textContent.startsWith('export ')).length")->{value}, 1,
   'the export lines shown once, not twice');
clean('the quickstart\'s first run', allow => []);
step('the same link again, in a new browser', open => url => $url);
step('used: said so', wait => js => "document.getElementById('gate-error').textContent.includes('used or has expired')");
clean('a used ticket', allow => [qr{/console/ticket 400}, qr/status of 400/]);
chdir $dir;
`$Cli serve --stop 2>&1`;
chdir $here;
is($?, 0, 'stopped');



=== TEST 8: a phone's width and the keyboard: nothing wider than the screen; a request reached and opened with Tab and Enter
--- request
GET /healthz
--- check
is(message_with('tenant-key')->{status}, 200, 'a request');
step('the console on a phone', open => url => base() . '/console/', width => 390, height => 844, mobile => JSON::PP::true());
step('asks for a key', wait => js => "!document.getElementById('gate').hidden");
step('typed', type => sel => '#gate-key', text => 'admin-key');
step('sign in', click => sel => '#gate-form button');
step('the overview', wait => js => text_has('Yes, a request can go now'));
is(drv(eval => js => "document.documentElement.scrollWidth <= window.innerWidth")->{value}, JSON::PP::true(), 'no sideways scroll');
shot('phone', full => 0);
step('requests', eval => js => "location.hash = '#/requests'");
step('listed', wait => js => "document.querySelectorAll('main tr.link').length >= 1");
is(drv(eval => js => "document.documentElement.scrollWidth <= window.innerWidth")->{value}, JSON::PP::true(), 'the table scrolls in its box, not the page');
# keyboard: from the filter box, Tab reaches the first row; Enter opens it
step('the filter box', eval => js => "document.querySelector('main input[type=search]').focus()");
my $at;
for (1 .. 30) {
    $at = drv(key => key => 'Tab')->{value};
    last if $at && ($at->{cls} // '') eq 'link';
}
is($at->{cls}, 'link', 'a row is reached with Tab');
drv(key => key => 'Enter');
step('Enter opens the inspector', wait => js => text_has('Routing decision'));
clean('phone and keyboard');



=== TEST 9: open mode (no key anywhere): the console asks nothing, and says so
--- user_files
>>> tb.yaml
accounts:
  - id: a1
    api_key: sk-a1
    base_url: http://127.0.0.1:${TEST_NGINX_MOCK_PORT}
--- request
GET /healthz
--- check
step('the console', open => url => base() . '/console/');
step('no key asked: the overview', wait => js => text_has('Yes, a request can go now') . " && document.getElementById('gate').hidden");
like(drv(eval => js => "document.getElementById('conn').textContent")->{value}, qr/open mode/, 'says so');
step('connect', eval => js => "location.hash = '#/connect'");
step('any token does', wait => js => text_has('open mode') . " && document.querySelector('[data-export]')");
clean('open mode');



=== TEST 10: the upstream unreachable: no account reads as ready - the overview says which fail, since when and what clients get; /healthz says why
--- user_files
>>> tb.yaml
server:
  allow_private_hosts: true
accounts:
  - id: a1
    api_key: sk-a1
    base_url: http://127.0.0.1:${TEST_NGINX_DEAD_PORT}
  - id: a2
    api_key: sk-a2
    base_url: http://127.0.0.1:${TEST_NGINX_DEAD_PORT}
keys:
  - key: admin-key
    name: ops
    admin: true
  - key: tenant-key
    name: tenant
--- request
GET /healthz
--- check
my $r = message_with('tenant-key');
is($r->{status}, 502, 'every attempt failed to connect: 502');
my $h = TB::Nginx::http_request(method => 'GET', path => '/healthz');
is($h->{status}, 503, '/healthz: 503, nothing can serve');
my $hj = json_decode($h->{body});
is_deeply([$hj->{ready}, $hj->{failing}, $hj->{last_success_ago}], [0, 2, undef], 'none ready, two failing, no success yet');
is_deeply($hj->{reasons}, [{ state => 'failing', reason => 'no answer: connect error, reset or TLS failure', accounts => 2 }],
          'why, counted, without naming an account') or diag($h->{body});
sign_in('admin-key');
my $want = 'Not now. 2 of 2 accounts failing: no answer: connect error, reset or TLS failure, for ';
step('the overview says they fail', wait => js => text_has($want));
my $text = drv(eval => js => "document.querySelector('.answer').textContent")->{value};
unlike($text, qr/Yes, a request can go now|ready/, 'never "ready"');
like($text, qr/no request has succeeded since the gateway started\. .*clients get 502 or 504/, 'no success yet, and what clients get') or diag($text);
is(drv(eval => js => "document.querySelectorAll('main .pill.st-failing').length")->{value}, 2, 'both accounts: failing');
like(drv(eval => js => "document.querySelector('.tiles').textContent")->{value}, qr/0 \/ 2\s*2 failing/, 'the accounts tile counts them');
shot('failing');
clean('failing');



=== TEST 11: every account resting longer than a request may wait: the overview says clients get 429, as they do
--- request
GET /healthz
--- check
mock_config({ credentials => { map { ("sk-a$_" => { behavior => '429:90' }) } 1, 2 } });
my $r = message_with('tenant-key');
is($r->{status}, 429, 'both rate-limited for 90 s, the queue waits 60 s at most: 429');
ok($r->{headers}{'retry-after'} >= 60, "with retry-after $r->{headers}{'retry-after'}");
sign_in('admin-key');
step('the overview', wait => js => text_has('longer than a request may wait in the queue (1:00): until then clients get 429 with retry-after'));
unlike(drv(eval => js => "document.querySelector('.answer').textContent")->{value}, qr/requests wait in the queue/, 'not that they wait');
is(message_with('tenant-key')->{status}, 429, 'and a client does get 429');
clean('resting');



=== TEST 12: a phone (390 px): every page fits the screen (nothing scrolls sideways but a table in its box) and its tab is in sight
--- request
GET /healthz
--- check
for my $i (1 .. 4) {
    is(message_with('tenant-key', text => "phone $i")->{status}, 200, "request $i");
}
my $r = TB::Nginx::http_request(%{ message_args('tenant-key', text => 'fails over') },
    headers => { %{ message_args('tenant-key')->{headers} }, 'x-mock-script' => '529,ok', 'x-mock-script-id' => 'ph1' });
my $id = $r->{headers}{'x-tokenbiryani-request-id'};
ok(TB::Nginx::poll_until(5, sub { my ($s) = admin(GET => "/admin/requests/$id"); $s == 200 }), 'the inspector has it');
step('the console on a phone', open => url => base() . '/console/', width => 390, height => 844, mobile => JSON::PP::true());
step('asks for a key', wait => js => "!document.getElementById('gate').hidden");
step('typed', type => sel => '#gate-key', text => 'admin-key');
step('sign in', click => sel => '#gate-form button');
step('the overview', wait => js => text_has('Yes, a request can go now'));
# what is wider than the screen, outside a box that scrolls it
my $wide = <<'_JS_';
(() => {
    const vw = window.screen.width, out = [];
    for (const el of document.querySelectorAll('body *')) {
        const r = el.getBoundingClientRect();
        if (r.width === 0 || r.right <= 0 || (r.right <= vw + 0.5 && r.left >= -0.5)) { continue; }
        let p = el.parentElement, boxed = false;
        for (; p && p !== document.body; p = p.parentElement) {
            const o = getComputedStyle(p).overflowX;
            if (o === 'auto' || o === 'scroll' || o === 'hidden') { boxed = true; break; }
        }
        if (!boxed) { out.push(el.tagName.toLowerCase() + (el.className && typeof el.className === 'string' ? '.' + el.className.split(' ').join('.') : '') + ' ' + Math.round(r.left) + '..' + Math.round(r.right)); }
    }
    return { doc: document.documentElement.scrollWidth, vw, out: out.slice(0, 8) };
})()
_JS_
my $tab = "(() => { const a = document.querySelector('#nav a[aria-current=\"page\"]'); if (!a) { return 'none'; } const r = a.getBoundingClientRect(); return r.left >= 0 && r.right <= window.screen.width ? 'visible' : 'off-screen ' + Math.round(r.left) + '..' + Math.round(r.right); })()";
my $navh = "Math.round(document.getElementById('nav').getBoundingClientRect().height)";
my @pages = (
    ['#/overview', text_has('Yes, a request can go now') . " && document.querySelectorAll('main .meters').length === 2", 'overview'],
    ['#/accounts', text_has('primary'), 'accounts'],
    ['#/accounts/a1', text_has('What the meters can and cannot tell') . " && document.querySelectorAll('main table').length === 3", 'account'],
    ['#/usage', "document.querySelectorAll('main svg.chart').length === 3", 'usage'],
    ['#/requests', "document.querySelectorAll('main tr.link').length >= 5", 'requests'],
    ["#/requests/$id", text_has('Routing decision'), 'request'],
    ['#/efficiency', text_has('The costliest conversations') . " && document.querySelectorAll('main table').length === 6", 'efficiency'],
    ['#/keys', text_has('Mint a key'), 'keys'],
    ['#/connect', text_has('Mint a key for this client'), 'connect'],
    ['#/welcome', text_has('Which credential?'), 'welcome'],
    ['#/settings', text_has('routing.strategy'), 'settings'],
);
for my $p (@pages) {
    my ($hash, $ready, $name) = @$p;
    visit($hash, $ready, "$name at 390 px");
    my $w = drv(eval => js => $wide)->{value};
    ok($w->{doc} <= $w->{vw}, "$name: the page is no wider than the screen ($w->{doc} px of $w->{vw})")
        or diag(explain($w->{out}));
    is(drv(eval => js => $tab)->{value}, 'visible', "$name: its tab in sight");
    ok(drv(eval => js => $navh)->{value} <= 60, "$name: the navigation one row high");
    shot("phone-$name", full => 0) if $name =~ /^(overview|account|efficiency)$/;
    if ($name eq 'overview') {
        my $cap = drv(eval => js => "[...document.querySelectorAll('main .card p.muted')].map(p => p.textContent).join('|')")->{value};
        like($cap, qr/accounts ready, \d+(?:\.\d+)?[kM]? input tokens now, \d+(?:\.\d+)?[kM]? within the hour/, 'the horizon\'s caption in tokens to read')
            or diag($cap);
    }
}
clean('a phone');



=== TEST 13: the operator's subscription: its row shows its 5-hour and 7-day windows as meters, and /admin/pacing's reading without dollars on the Efficiency page
--- user_files
>>> tb.yaml
accounts:
  - id: sub
    name: my subscription
    type: oauth
    api_key: sk-ant-oat01-console
    base_url: http://127.0.0.1:${TEST_NGINX_MOCK_PORT}
keys:
  - key: admin-key
    name: ops
    admin: true
  - key: tenant-key
    name: tenant
--- request
GET /healthz
--- check
mock_config({ credentials => { 'sk-ant-oat01-console' => { subscription => { five_hour_requests => 4, seven_day_requests => 40 } } } });
is(message_with('tenant-key', text => "sub $_")->{status}, 200, "request $_") for 1 .. 3;
sign_in('admin-key');
visit('#/', "document.querySelectorAll('main .meters.subscription').length === 1", 'the overview');
my $m = drv(eval => js => "Array.from(document.querySelectorAll('main .meters.subscription [role=meter]')).map(e => e.getAttribute('aria-label') + '=' + e.getAttribute('aria-valuenow')).join(',')")->{value};
is($m, '5h window left=25,7d window left=93', 'two meters: a quarter of the 5-hour window left, 93 % of the 7-day one') or diag($m);
visit('#/efficiency', text_has('sub 5h') . ' && ' . text_has('75% of the window'), 'efficiency');
clean('subscription');
