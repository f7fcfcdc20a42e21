# What another instance of the gateway knows and writes: the store's
# secret key (given to the master through its environment when the suite
# loads this), and a record in its envelope (src/core/tb_record.h) made
# under it - for the suites that play a store writer, honest or not.
package TB::Record;

use strict;
use warnings;

use Digest::SHA qw(hmac_sha256 sha256_hex);
use MIME::Base64 qw(encode_base64url);
use Exporter 'import';

our @EXPORT = qw(part wrap);

our $Hex = join '', map { sprintf '%02x', $_ } 0 .. 31;
our $Secret = pack 'H*', $Hex;
our $Kid = substr(sha256_hex($Secret), 0, 8);
our $RecKey = hmac_sha256('tokenbiryani record authentication v1', $Secret);

$ENV{TOKENBIRYANI_SECRET_KEY} = $Hex;

# the secret key, its id and the record key derived from it
sub secret { ($Hex, $Secret, $Kid, $RecKey) }

sub part { pack('N', length $_[0]) . $_[0] }

# (kind, name, bound, generation, payload) in its envelope
sub wrap {
    my ($kind, $name, $bound, $gen, $payload) = @_;
    my $mac = hmac_sha256("tba1\0$kind\0" . pack('Q>', $gen) . part($name) . part($bound) . part($payload),
                          $RecKey);
    "tba1.$Kid.$gen." . encode_base64url($mac) . ".$payload";
}

1;
