package TB::Gateway;

# Shared pieces of the gateway's suites: the nginx.conf fragments, request
# bodies, and small parsers for what the mock logged and the client got.

use strict;
use warnings;
use Exporter 'import';
use JSON::PP ();
use POSIX ();
use Time::HiRes ();

our @EXPORT = qw($HttpConfig $Locations gateway_suite pool_yaml
                 msg_body stream_body sse_events
                 count_events credentials_of big_body turn_body
                 admin_get admin_post pool_status account_of quiet_pool_ok
                 bg_request bg_result);



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
