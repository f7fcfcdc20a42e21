package TB::Spec;

# Declarative sections for the gateway's suites: the checks that recur in
# nearly every block (what the upstream saw, what the client got of it,
# what the inspector recorded, how the mock was scripted), written as data
# the way Test::Nginx's own sections are.  gateway_suite() installs them;
# a block preprocessor turns them into a call at the head of --- check
# (and --- init for --- mock), so they run in the block's order: the mock
# scripted before the requests, the sections checked right after them and
# before any Perl of the block's own.
#
# --- mock
#   JSON: the mock's configuration for this block (mock_config()).
#
# --- upstream
#   A table of what the mock was asked, one row per request it saw, in
#   order; the first row names the columns (fields of the mock's log:
#   method, path, status, credential, script_id, ...; h:NAME is a request
#   header).  A cell is a value, * (anything), - (absent) or ~REGEX.
#   The rows must be exactly as many as the requests the mock saw;
#   "--- upstream: none" says nothing went upstream.
#
# --- upstream_distinct: FIELD
#   Every request the mock saw has another value of FIELD (credential:
#   each attempt on another account).
#
# --- verbatim: N
#   The client's last response is byte for byte the body the mock sent to
#   its Nth request (1-based; "last" for the last one).
#
# --- account: ID
#   x-tokenbiryani-account of the last response names ID; "answered" is
#   the account whose credential the verbatim request (or else the last)
#   carried (sk-ID, as pool_yaml() writes them, or %main::Account).
#
# --- sse
#   Event counts of the last response's event-stream, a line each:
#   "message_start: 1", "content_block_delta: >= 3".
#
# --- record
#   The inspector's record of the last response (/admin/requests/ID), a
#   line each: "dotted.path: EXPECTED", EXPECTED one of a JSON scalar
#   (1, "text", null, true), a bare word or text (compared as a string),
#   ~REGEX, "> N" / ">= N" / "< N" / "<= N", "N items" (an array's size)
#   or * (present and not null).

use strict;
use warnings;
use Test::More ();
use TB::Nginx ();

our @Sections = qw(mock upstream upstream_distinct verbatim account sse record);

my $Installed;

sub install {
    return if $Installed++;
    TB::Nginx::declare_sections(@Sections);
    TB::Nginx::add_block_preprocessor(sub {
        my $b = shift;
        return unless grep { defined $b->$_ } @Sections;
        if (defined $b->mock) {
            my $init = $b->init;
            $b->set_value(init => "TB::Spec::apply_mock(\$block);\n" . ($init // ''));
        }
        my $check = $b->check;
        $b->set_value(check => "TB::Spec::verify(\$block, \@responses);\n" . ($check // ''));
    });
}

sub apply_mock {
    my $b = shift;
    TB::Nginx::mock_config(TB::Nginx::json_decode($b->mock));
}

sub verify {
    my ($b, @responses) = @_;
    my $resp = $responses[-1];
    my $log = (grep { defined $b->$_ } qw(upstream upstream_distinct verbatim account))
              ? TB::Nginx::mock_log() : [];

    upstream_ok($b->upstream, $log) if defined $b->upstream;
    if (defined(my $f = $b->upstream_distinct)) {
        my %seen = map { ($_->{$f} // '') => 1 } @$log;
        Test::More::is(scalar keys %seen, scalar @$log,
                       "upstream: each of the " . @$log . " requests had another $f");
    }
    my $answered = @$log ? $log->[-1] : undef;
    if (defined(my $n = $b->verbatim)) {
        my $i = $n eq 'last' ? $#$log : $n - 1;
        $answered = $log->[$i];
        die "--- verbatim: the mock saw no request $n\n" unless $answered;
        Test::More::is(TB::Nginx::sha256_hex($resp->{body}), $answered->{resp_sha256},
                       "the client got exactly the bytes of upstream request $n");
        Test::More::is(length $resp->{body}, $answered->{resp_len}, '... the same length');
    }
    if (defined(my $id = $b->account)) {
        if ($id eq 'answered') {
            die "--- account: answered, but nothing went upstream\n" unless $answered;
            my $cred = $answered->{credential} // '';
            no warnings 'once';
            $id = $main::Account{$cred} // ($cred =~ /^sk-(.+)$/ ? $1 : $cred);
        }
        Test::More::is($resp->{headers}{'x-tokenbiryani-account'}, $id,
                       "x-tokenbiryani-account names $id"
                       . ($b->account eq 'answered' ? ', whose credential answered' : ''));
    }
    if (defined(my $sse = $b->sse)) {
        my $ev = TB::Gateway::sse_events($resp->{body});
        for my $line (lines($sse)) {
            my ($name, $want) = $line =~ /^([\w.]+)\s*:\s*(.+)$/
                or die "--- sse: not 'event: count': $line\n";
            my $n = grep { ($_->[0] // '') eq $name } @$ev;
            cmp_ok_spec($n, $want, "event-stream: $name $want");
        }
    }
    if (defined(my $rec = $b->record)) {
        my $r = TB::Nginx::request_record($resp);
        for my $line (lines($rec)) {
            my ($path, $want) = $line =~ /^([\w.\-]+)\s*:\s*(.*)$/
                or die "--- record: not 'path: value': $line\n";
            my ($found, $v) = dig($r, $path);
            if ($want =~ /^(\d+) items?$/) {
                Test::More::is(ref $v eq 'ARRAY' ? scalar @$v : undef, $1,
                               "record: $path has $1 items");
            } elsif ($want eq '*') {
                Test::More::ok(defined $v, "record: $path is there");
            } else {
                cmp_ok_spec($v, $want, "record: $path $want");
            }
        }
    }
}

sub lines { grep { /\S/ && !/^\s*#/ } map { s/^\s+|\s+$//gr } split /\n/, $_[0] }

sub dig {
    my ($v, $path) = @_;
    for my $k (split /\./, $path) {
        if (ref $v eq 'HASH' && exists $v->{$k}) { $v = $v->{$k} }
        elsif (ref $v eq 'ARRAY' && $k =~ /^-?\d+$/ && defined $v->[$k]) { $v = $v->[$k] }
        else { return (0, undef) }
    }
    (1, $v);
}

# $got against one expectation of the forms the sections take
sub cmp_ok_spec {
    my ($got, $want, $name) = @_;
    if ($want =~ /^(>=|<=|>|<)\s*(-?[\d.]+)$/) {
        return Test::More::cmp_ok($got // 'undef', $1, $2, $name);
    }
    if ($want =~ /^~\s*(.*)$/) {
        return Test::More::like($got, qr/$1/, $name);
    }
    if ($want eq 'null') { return Test::More::is($got, undef, $name) }
    if ($want eq 'true' || $want eq 'false') {
        return Test::More::is(defined $got ? ($got ? 'true' : 'false') : undef, $want, $name);
    }
    $want = TB::Nginx::json_decode($want) if $want =~ /^"/;
    Test::More::is($got, $want, $name);
}

sub upstream_ok {
    my ($table, $log) = @_;
    if ($table eq 'none') {
        Test::More::is(scalar @$log, 0, 'nothing went upstream')
            or Test::More::diag(TB::Nginx::json_encode([map { $_->{path} } @$log]));
        return;
    }
    my ($head, @rows) = lines($table);
    my @cols = split ' ', $head;
    Test::More::is(scalar @$log, scalar @rows, 'the upstream saw ' . @rows . ' request(s)')
        or Test::More::diag('it saw: ' . TB::Nginx::json_encode(
               [map { my $e = $_; join ' ', map { cell_of($e, $_) // '-' } @cols } @$log]));
    for my $i (0 .. $#rows) {
        my @cells = split ' ', $rows[$i];
        die "--- upstream: row " . ($i + 1) . " has " . @cells . " cells for " . @cols
            . " columns\n" unless @cells == @cols;
        my $e = $log->[$i] // {};
        for my $c (0 .. $#cols) {
            my ($want, $got) = ($cells[$c], cell_of($e, $cols[$c]));
            next if $want eq '*';
            my $name = "upstream request " . ($i + 1) . ": $cols[$c] $want";
            if ($want eq '-') { Test::More::ok(!defined $got, $name) }
            elsif ($want =~ /^~(.*)$/) { Test::More::like($got, qr/$1/, $name) }
            else { Test::More::is($got, $want, $name) }
        }
    }
}

sub cell_of {
    my ($e, $col) = @_;
    return $e->{headers}{lc $1} if $col =~ /^h:(.+)$/;
    $e->{$col};
}

1;
