# The Debian packages `make deb` builds (debian/, src/tools/build-deb.sh):
# what each holds and with which modes, the nginx ABI the module depends
# on, the load_module line dh_nginx enables, the conffiles, the systemd
# drop-in as systemd reads it, and the packaged module and configuration
# accepted by `nginx -t` as they would be installed.  `make test` builds
# the packages first; without them this file says so and skips.
use strict;
use warnings;
use Test::More;
use File::Temp qw(tempdir);

my $dir = $ENV{TB_DEB_DIR} || 'build/deb';
my ($mod) = glob("$dir/libnginx-mod-http-tokenbiryani_*.deb");
my ($cli) = glob("$dir/tokenbiryani_*.deb");
plan skip_all => "no packages in $dir: `make deb` builds them (debhelper, nginx-dev)"
    unless $mod && $cli;

sub run { my $out = `@_ 2>&1`; ($? >> 8, $out) }

# what dpkg-deb -c lists: path => [mode, owner]
sub contents {
    my ($deb) = @_;
    my (%c, $rc, $out);
    ($rc, $out) = run('dpkg-deb', '-c', $deb);
    die "dpkg-deb -c $deb: $out" if $rc;
    for (split /\n/, $out) {
        my ($mode, $owner, undef, undef, undef, $path) = split ' ', $_, 6;
        $path =~ s{^\./}{/};
        $c{$path} = [$mode, $owner];
    }
    \%c;
}

sub field {
    my ($deb, $name) = @_;
    my ($rc, $out) = run('dpkg-deb', '-f', $deb, $name);
    chomp $out;
    $out;
}

my $tmp = tempdir('tb-deb-XXXXXX', TMPDIR => 1, CLEANUP => 1);

# --- the module's package
{
    my $c = contents($mod);
    is($c->{'/usr/lib/nginx/modules/ngx_http_tokenbiryani_module.so'}[0], '-rw-r--r--',
       'module: the .so in nginx\'s module directory');
    ok($c->{'/usr/lib/nginx/modules/ngx_http_tokenbiryani_example_strategy_module.so'},
       'module: the example strategy plugin beside it');
    ok($c->{'/usr/share/nginx/modules-available/mod-http-tokenbiryani.conf'},
       'module: its load_module line in modules-available');
    my ($rc, $conf) = run('dpkg-deb', '--fsys-tarfile', $mod, '|', 'tar', '-xO',
                          './usr/share/nginx/modules-available/mod-http-tokenbiryani.conf');
    is($conf, "load_module modules/ngx_http_tokenbiryani_module.so;\n", 'module: the line');

    my ($abi) = `cat /usr/share/nginx/src/debian/libnginx-mod.abisubstvars` =~ /^nginx:abi=(\S+)/m;
    ok($abi, "nginx-dev names the ABI ($abi)");
    like(field($mod, 'Depends'), qr/(?:^|, )\Q$abi\E(?:,|$)/,
         'module: Depends on exactly that nginx ABI, as dh_nginx computed it');

    system('dpkg-deb', '-e', $mod, "$tmp/mod-control") == 0 or die "dpkg-deb -e $mod\n";
    my $postinst = do { local (@ARGV, $/) = "$tmp/mod-control/postinst"; <> };
    like($postinst, qr{ln -sf /usr/share/nginx/modules-available/\$from\s+\\?\s*/etc/nginx/modules-enabled/\$to}s,
         'module: postinst enables it in modules-enabled');
    like($postinst, qr/mod-http-tokenbiryani\.conf:50-mod-http-tokenbiryani\.conf/,
         'module: ... as 50-mod-http-tokenbiryani.conf');
}

# --- the command and configuration
{
    my $c = contents($cli);
    my %want = ('/usr/bin/tokenbiryani' => '-rwxr-xr-x',
                '/etc/tokenbiryani/tokenbiryani.yaml' => '-rw-r--r--',
                '/etc/tokenbiryani/env' => '-rw-------',
                '/etc/nginx/sites-available/tokenbiryani' => '-rw-r--r--',
                '/lib/systemd/system/nginx.service.d/tokenbiryani.conf' => '-rw-r--r--');
    for my $p (sort keys %want) {
        is($c->{$p}[0] // 'absent', $want{$p}, "tokenbiryani: $p $want{$p}");
        is($c->{$p}[1] // '', 'root/root', "tokenbiryani: $p root's") if $c->{$p};
    }
    ok(!grep({ m{/etc/nginx/sites-enabled/} } keys %$c), 'the site is not enabled by the package');
    ok(!grep({ /\.key$/ } keys %$c), 'no secret key in the package: postinst makes it');
    like(field($cli, 'Depends'), qr/libnginx-mod-http-tokenbiryani \(= [^)]+\)/,
         'tokenbiryani: Depends on the module of its own version');

    system('dpkg-deb', '-e', $cli, "$tmp/cli-control") == 0 or die "dpkg-deb -e $cli\n";
    my $conffiles = do { local (@ARGV, $/) = "$tmp/cli-control/conffiles"; <> } // '';
    for my $f ('/etc/tokenbiryani/tokenbiryani.yaml', '/etc/tokenbiryani/env',
               '/etc/nginx/sites-available/tokenbiryani') {
        like($conffiles, qr/^\Q$f\E$/m, "conffile: $f (an upgrade keeps the operator's)");
    }
    my $postinst = do { local (@ARGV, $/) = "$tmp/cli-control/postinst"; <> };
    like($postinst, qr/if \[ ! -e "\$key" \]/, 'postinst: the secret key made only when missing');
    like($postinst, qr/umask 077/, 'postinst: ... 0600');
    like($postinst, qr/install -d -m 0755 -o root -g root \/var\/lib\/tokenbiryani/,
         'postinst: the store directory, root\'s alone (the module refuses one the workers may write)');
    my $postrm = do { local (@ARGV, $/) = "$tmp/cli-control/postrm"; <> };
    like($postrm, qr/"\$1" = purge.*echo "tokenbiryani: purging removes the store.*rm -rf \/var\/lib\/tokenbiryani/s,
         'postrm: a purge says what it removes, then removes the store and the key');
    unlike($postrm =~ s/if \[ "\$1" = purge \].*?\nfi\n//sr, qr{rm -rf /var/lib/tokenbiryani},
           'postrm: nothing but a purge removes the store');

    # the binary asks for the module where the package puts it
    system('dpkg-deb', '-x', $cli, "$tmp/root") == 0 or die "dpkg-deb -x $cli\n";
    system('dpkg-deb', '-x', $mod, "$tmp/root") == 0 or die "dpkg-deb -x $mod\n";
    my ($rc, $strings) = run('grep', '-c', '-a', '/usr/lib/nginx/modules/ngx_http_tokenbiryani_module.so',
                             "$tmp/root/usr/bin/tokenbiryani");
    cmp_ok($strings, '>=', 1, 'the command loads the packaged module');
}

# --- the drop-in, as systemd reads it with nginx's own unit
SKIP: {
    skip 'systemd-analyze or nginx.service is missing', 2
        unless -x '/usr/bin/systemd-analyze' && -f '/lib/systemd/system/nginx.service';
    my $u = "$tmp/units";
    mkdir $u; mkdir "$u/nginx.service.d";
    system('cp', '/lib/systemd/system/nginx.service', "$u/") == 0 or die;
    system('cp', "$tmp/root/lib/systemd/system/nginx.service.d/tokenbiryani.conf", "$u/nginx.service.d/") == 0
        or die;
    my $out = `SYSTEMD_UNIT_PATH='$u:' systemd-analyze verify '$u/nginx.service' 2>&1 >/dev/null`;
    is($?, 0, 'systemd-analyze verify nginx.service with the drop-in: exit 0');
    is($out, '', '... and nothing on stderr (an unknown key would be)') or diag($out);
}

# --- nginx -t: the packaged module, site and YAML, installed as they would
# be (paths moved under a scratch root: the store and the key)
{
    my $r = "$tmp/root";
    my $yaml = do { local (@ARGV, $/) = "$r/etc/tokenbiryani/tokenbiryani.yaml"; <> };
    $yaml =~ s{/var/lib/tokenbiryani/}{$r/var/lib/tokenbiryani/}g;
    $yaml =~ s{/etc/tokenbiryani/}{$r/etc/tokenbiryani/}g;
    mkdir "$r/var"; mkdir "$r/var/lib"; mkdir "$r/var/lib/tokenbiryani";
    open my $fh, '>', "$r/etc/tokenbiryani/tokenbiryani.yaml" or die; print $fh $yaml; close $fh;
    my $site = do { local (@ARGV, $/) = "$r/etc/nginx/sites-available/tokenbiryani"; <> };
    $site =~ s{/etc/tokenbiryani/}{$r/etc/tokenbiryani/}g;
    $site =~ s{listen 127\.0\.0\.1:8787}{listen 127.0.0.1:1}g;
    mkdir "$tmp/prefix"; mkdir "$tmp/prefix/logs"; mkdir "$tmp/prefix/conf";
    open $fh, '>', "$tmp/prefix/conf/nginx.conf" or die;
    print $fh "load_module $r/usr/lib/nginx/modules/ngx_http_tokenbiryani_module.so;\n"
            . "error_log $tmp/prefix/logs/error.log;\npid $tmp/prefix/logs/nginx.pid;\n"
            . "events {}\nhttp {\n$site\n}\n";
    close $fh;
    my ($rc, $out) = run('nginx', '-t', '-p', "$tmp/prefix/", '-c', 'conf/nginx.conf');
    is($rc, 0, 'nginx -t accepts the packaged module, site and configuration') or diag($out);
    like($out, qr/test is successful/, '... and says so');
}

done_testing();
