/*
 * Unit tests: AWS Signature Version 4.  The vectors are AWS's published
 * signing test suite (aws-sig-v4-test-suite, as carried by awslabs'
 * aws-c-auth, tests/aws-signing-test-suite/v4: each case's request, its
 * canonical request and its signature, header-signed), with
 * AKIDEXAMPLE's example secret, us-east-1, service "service",
 * 2015-08-30T12:36:00Z.  The cases that need path normalisation and the
 * one with a folded header line are left out: the gateway signs paths it
 * built itself and refuses line breaks.  Then what Bedrock needs: a
 * model id's %3A signed as %253A.
 */

#include <stdlib.h>

#include "tb_test.h"
#include "tb_sigv4.h"


typedef struct {
    const char  *name;
    const char  *method;
    const char  *path;
    const char  *query;
    struct { const char *k, *v; }  h[8];
    size_t       nh;
    const char  *body;
    const char  *canonical;
    const char  *signature;
} vector_t;


static const vector_t  vectors[] = {
    { "get-header-key-duplicate", "GET", "/", "",
      { { "Host", "example.amazonaws.com" }, { "My-Header1", "value2" }, { "My-Header1", "value2" }, { "My-Header1", "value1" }, { "X-Amz-Date", "20150830T123600Z" } }, 5,
      "",
      "GET\n/\n\nhost:example.amazonaws.com\nmy-header1:value2,value2,value1\nx-amz-date:20150830T123600Z\n\nhost;my-header1;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
      "c9d5ea9f3f72853aea855b47ea873832890dbdd183b4468f858259531a5138ea" },
    { "get-header-value-order", "GET", "/", "",
      { { "Host", "example.amazonaws.com" }, { "My-Header1", "value4" }, { "My-Header1", "value1" }, { "My-Header1", "value3" }, { "My-Header1", "value2" }, { "X-Amz-Date", "20150830T123600Z" } }, 6,
      "",
      "GET\n/\n\nhost:example.amazonaws.com\nmy-header1:value4,value1,value3,value2\nx-amz-date:20150830T123600Z\n\nhost;my-header1;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
      "08c7e5a9acfcfeb3ab6b2185e75ce8b1deb5e634ec47601a50643f830c755c01" },
    { "get-header-value-trim", "GET", "/", "",
      { { "Host", "example.amazonaws.com" }, { "My-Header1", " value1" }, { "My-Header2", " \"a   b   c\"" }, { "X-Amz-Date", "20150830T123600Z" } }, 4,
      "",
      "GET\n/\n\nhost:example.amazonaws.com\nmy-header1:value1\nmy-header2:\"a b c\"\nx-amz-date:20150830T123600Z\n\nhost;my-header1;my-header2;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
      "acc3ed3afb60bb290fc8d2dd0098b9911fcaa05412b367055dee359757a9c736" },
    { "get-relative-relative-unnormalized", "GET", "/example1/example2/../..", "",
      { { "Host", "example.amazonaws.com" }, { "X-Amz-Date", "20150830T123600Z" } }, 2,
      "",
      "GET\n/example1/example2/../..\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
      "dc33e0856fd4baca4d7aa2146c38958283844764f38c74252a333df5e613003b" },
    { "get-relative-unnormalized", "GET", "/example/..", "",
      { { "Host", "example.amazonaws.com" }, { "X-Amz-Date", "20150830T123600Z" } }, 2,
      "",
      "GET\n/example/..\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
      "eca7ead57bb5aa5c8e28007acd4ff04e1ff9a0ff3b237ec1554a184887ff9282" },
    { "get-slash-dot-slash-unnormalized", "GET", "/./", "",
      { { "Host", "example.amazonaws.com" }, { "X-Amz-Date", "20150830T123600Z" } }, 2,
      "",
      "GET\n/./\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
      "68714168e6557f8f2de0ef956fc24dc2593a4bd2961f8df51898d8a134695145" },
    { "get-slash-pointless-dot-unnormalized", "GET", "/./example", "",
      { { "Host", "example.amazonaws.com" }, { "X-Amz-Date", "20150830T123600Z" } }, 2,
      "",
      "GET\n/./example\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
      "beb03f223f7deae4146464f06e29eebbee9c8afbe15c290cf07aa8b119e14cff" },
    { "get-slash-unnormalized", "GET", "//", "",
      { { "Host", "example.amazonaws.com" }, { "X-Amz-Date", "20150830T123600Z" } }, 2,
      "",
      "GET\n//\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
      "c88bcd3d312d75078c0cd961d6deae3f4c754924b01669efcfcb439fd5e5b76e" },
    { "get-slashes-unnormalized", "GET", "//example//", "",
      { { "Host", "example.amazonaws.com" }, { "X-Amz-Date", "20150830T123600Z" } }, 2,
      "",
      "GET\n//example//\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
      "87cca117541a147f6df867677d98a7d80dff226d2bfca9e4ffa899665623c7e5" },
    { "get-space-unnormalized", "GET", "/example space/", "",
      { { "Host", "example.amazonaws.com" }, { "X-Amz-Date", "20150830T123600Z" } }, 2,
      "",
      "GET\n/example%20space/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
      "652487583200325589f1fba4c7e578f72c47cb61beeca81406b39ddec1366741" },
    { "get-unreserved", "GET", "/-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz", "",
      { { "Host", "example.amazonaws.com" }, { "X-Amz-Date", "20150830T123600Z" } }, 2,
      "",
      "GET\n/-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
      "07ef7494c76fa4850883e2b006601f940f8a34d404d0cfa977f52a65bbf5f24f" },
    { "get-utf8", "GET", "/ሴ", "",
      { { "Host", "example.amazonaws.com" }, { "X-Amz-Date", "20150830T123600Z" } }, 2,
      "",
      "GET\n/%E1%88%B4\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
      "8318018e0b0f223aa2bbf98705b62bb787dc9c0e678f255a891fd03141be5d85" },
    { "get-vanilla", "GET", "/", "",
      { { "Host", "example.amazonaws.com" }, { "X-Amz-Date", "20150830T123600Z" } }, 2,
      "",
      "GET\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
      "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31" },
    { "get-vanilla-empty-query-key", "GET", "/", "Param1=value1",
      { { "Host", "example.amazonaws.com" }, { "X-Amz-Date", "20150830T123600Z" } }, 2,
      "",
      "GET\n/\nParam1=value1\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
      "a67d582fa61cc504c4bae71f336f98b97f1ea3c7a6bfe1b6e45aec72011b9aeb" },
    { "get-vanilla-query", "GET", "/", "",
      { { "Host", "example.amazonaws.com" }, { "X-Amz-Date", "20150830T123600Z" } }, 2,
      "",
      "GET\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
      "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31" },
    { "get-vanilla-query-order-encoded", "GET", "/", "Param-3=Value3&Param=Value2&%E1%88%B4=Value1",
      { { "Host", "example.amazonaws.com" }, { "X-Amz-Date", "20150830T123600Z" } }, 2,
      "",
      "GET\n/\n%E1%88%B4=Value1&Param=Value2&Param-3=Value3\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
      "371d3713e185cc334048618a97f809c9ffe339c62934c032af5a0e595648fcac" },
    { "get-vanilla-query-order-key-case", "GET", "/", "Param2=value2&Param1=value1",
      { { "Host", "example.amazonaws.com" }, { "X-Amz-Date", "20150830T123600Z" } }, 2,
      "",
      "GET\n/\nParam1=value1&Param2=value2\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
      "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500" },
    { "get-vanilla-query-unreserved", "GET", "/", "-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz=-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz",
      { { "Host", "example.amazonaws.com" }, { "X-Amz-Date", "20150830T123600Z" } }, 2,
      "",
      "GET\n/\n-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz=-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
      "9c3e54bfcdf0b19771a7f523ee5669cdf59bc7cc0884027167c21bb143a40197" },
    { "get-vanilla-utf8-query", "GET", "/", "ሴ=bar",
      { { "Host", "example.amazonaws.com" }, { "X-Amz-Date", "20150830T123600Z" } }, 2,
      "",
      "GET\n/\n%E1%88%B4=bar\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
      "2cdec8eed098649ff3a119c94853b13c643bcf08f8b0a1d91e12c9027818dd04" },
    { "get-vanilla-with-session-token", "GET", "/", "",
      { { "Host", "example.amazonaws.com" }, { "X-Amz-Date", "20150830T123600Z" }, { "X-Amz-Security-Token", "6e86291e8372ff2a2260956d9b8aae1d763fbf315fa00fa31553b73ebf194267" } }, 3,
      "",
      "GET\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\nx-amz-security-token:6e86291e8372ff2a2260956d9b8aae1d763fbf315fa00fa31553b73ebf194267\n\nhost;x-amz-date;x-amz-security-token\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
      "07ec1639c89043aa0e3e2de82b96708f198cceab042d4a97044c66dd9f74e7f8" },
    { "post-header-key-case", "POST", "/", "",
      { { "Host", "example.amazonaws.com" }, { "X-Amz-Date", "20150830T123600Z" } }, 2,
      "",
      "POST\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
      "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b" },
    { "post-header-key-sort", "POST", "/", "",
      { { "Host", "example.amazonaws.com" }, { "My-Header1", "value1" }, { "X-Amz-Date", "20150830T123600Z" } }, 3,
      "",
      "POST\n/\n\nhost:example.amazonaws.com\nmy-header1:value1\nx-amz-date:20150830T123600Z\n\nhost;my-header1;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
      "c5410059b04c1ee005303aed430f6e6645f61f4dc9e1461ec8f8916fdf18852c" },
    { "post-header-value-case", "POST", "/", "",
      { { "Host", "example.amazonaws.com" }, { "My-Header1", "VALUE1" }, { "X-Amz-Date", "20150830T123600Z" } }, 3,
      "",
      "POST\n/\n\nhost:example.amazonaws.com\nmy-header1:VALUE1\nx-amz-date:20150830T123600Z\n\nhost;my-header1;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
      "cdbc9802e29d2942e5e10b5bccfdd67c5f22c7c4e8ae67b53629efa58b974b7d" },
    { "post-sts-header-after", "POST", "/", "",
      { { "Host", "example.amazonaws.com" }, { "X-Amz-Date", "20150830T123600Z" } }, 2,
      "",
      "POST\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
      "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b" },
    { "post-sts-header-before", "POST", "/", "",
      { { "Host", "example.amazonaws.com" }, { "X-Amz-Date", "20150830T123600Z" }, { "X-Amz-Security-Token", "AQoDYXdzEPT//////////wEXAMPLEtc764bNrC9SAPBSM22wDOk4x4HIZ8j4FZTwdQWLWsKWHGBuFqwAeMicRXmxfpSPfIeoIYRqTflfKD8YUuwthAx7mSEI/qkPpKPi/kMcGdQrmGdeehM4IC1NtBmUpp2wUE8phUZampKsburEDy0KPkyQDYwT7WZ0wq5VSXDvp75YU9HFvlRd8Tx6q6fE8YQcHNVXAkiY9q6d+xo0rKwT38xVqr7ZD0u0iPPkUL64lIZbqBAz+scqKmlzm8FDrypNC9Yjc8fPOLn9FX9KSYvKTr4rvx3iSIlTJabIQwj2ICCR/oLxBA==" } }, 3,
      "",
      "POST\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\nx-amz-security-token:AQoDYXdzEPT//////////wEXAMPLEtc764bNrC9SAPBSM22wDOk4x4HIZ8j4FZTwdQWLWsKWHGBuFqwAeMicRXmxfpSPfIeoIYRqTflfKD8YUuwthAx7mSEI/qkPpKPi/kMcGdQrmGdeehM4IC1NtBmUpp2wUE8phUZampKsburEDy0KPkyQDYwT7WZ0wq5VSXDvp75YU9HFvlRd8Tx6q6fE8YQcHNVXAkiY9q6d+xo0rKwT38xVqr7ZD0u0iPPkUL64lIZbqBAz+scqKmlzm8FDrypNC9Yjc8fPOLn9FX9KSYvKTr4rvx3iSIlTJabIQwj2ICCR/oLxBA==\n\nhost;x-amz-date;x-amz-security-token\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
      "85d96828115b5dc0cfc3bd16ad9e210dd772bbebba041836c64533a82be05ead" },
    { "post-vanilla", "POST", "/", "",
      { { "Host", "example.amazonaws.com" }, { "X-Amz-Date", "20150830T123600Z" } }, 2,
      "",
      "POST\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
      "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b" },
    { "post-vanilla-empty-query-value", "POST", "/", "Param1=value1",
      { { "Host", "example.amazonaws.com" }, { "X-Amz-Date", "20150830T123600Z" } }, 2,
      "",
      "POST\n/\nParam1=value1\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
      "28038455d6de14eafc1f9222cf5aa6f1a96197d7deb8263271d420d138af7f11" },
    { "post-vanilla-query", "POST", "/", "Param1=value1",
      { { "Host", "example.amazonaws.com" }, { "X-Amz-Date", "20150830T123600Z" } }, 2,
      "",
      "POST\n/\nParam1=value1\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
      "28038455d6de14eafc1f9222cf5aa6f1a96197d7deb8263271d420d138af7f11" },
    { "post-x-www-form-urlencoded", "POST", "/", "",
      { { "Content-Type", "application/x-www-form-urlencoded" }, { "Host", "example.amazonaws.com" }, { "Content-Length", "13" }, { "X-Amz-Date", "20150830T123600Z" }, { "X-Amz-Content-Sha256", "9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e" } }, 5,
      "Param1=value1",
      "POST\n/\n\ncontent-length:13\ncontent-type:application/x-www-form-urlencoded\nhost:example.amazonaws.com\nx-amz-content-sha256:9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e\nx-amz-date:20150830T123600Z\n\ncontent-length;content-type;host;x-amz-content-sha256;x-amz-date\n9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e",
      "d3875051da38690788ef43de4db0d8f280229d82040bfac253562e56c3f20e0b" },
    { "post-x-www-form-urlencoded-parameters", "POST", "/", "",
      { { "Content-Type", "application/x-www-form-urlencoded; charset=utf-8" }, { "Host", "example.amazonaws.com" }, { "Content-Length", "13" }, { "X-Amz-Date", "20150830T123600Z" }, { "X-Amz-Content-Sha256", "9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e" } }, 5,
      "Param1=value1",
      "POST\n/\n\ncontent-length:13\ncontent-type:application/x-www-form-urlencoded; charset=utf-8\nhost:example.amazonaws.com\nx-amz-content-sha256:9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e\nx-amz-date:20150830T123600Z\n\ncontent-length;content-type;host;x-amz-content-sha256;x-amz-date\n9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e",
      "328d1b9eaadca9f5818ef05e8392801e091653bafec24fcab71e7344e7f51422" },
};


static const tb_sigv4_key_t  example = {
    "AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "us-east-1",
    "service"
};


static size_t
canonical(const vector_t *v, char *buf, size_t size, char *sh, size_t shsize)
{
    size_t             i;
    char               ph[65];
    tb_sigv4_header_t  h[8];

    for (i = 0; i < v->nh; i++) {
        h[i].name = v->h[i].k;
        h[i].name_len = strlen(v->h[i].k);
        h[i].value = v->h[i].v;
        h[i].value_len = strlen(v->h[i].v);
    }

    tb_sigv4_sha256_hex(v->body, strlen(v->body), ph);

    return tb_sigv4_canonical(buf, size, v->method,
                              (const unsigned char *) v->path,
                              strlen(v->path),
                              (const unsigned char *) v->query,
                              strlen(v->query), h, v->nh, ph, sh, shsize);
}


TB_TEST(aws_test_suite)
{
    size_t  i, n, m;
    char    buf[4096], sh[256], sig[65], authz[512], want[512];

    for (i = 0; i < sizeof(vectors) / sizeof(vectors[0]); i++) {
        const vector_t  *v = &vectors[i];

        n = canonical(v, buf, sizeof(buf), sh, sizeof(sh));

        if (n >= sizeof(buf) || strcmp(buf, v->canonical) != 0) {
            TB_FAIL_AT("%s: canonical request\n%s\nwant\n%s", v->name,
                       n < sizeof(buf) ? buf : "(too long)", v->canonical);
            continue;
        }

        /* measuring says the same length */
        TB_CHECK_INT(canonical(v, NULL, 0, sh, sizeof(sh)), n);

        if (tb_sigv4_signature(&example, "20150830T123600Z", buf, n, sig)
            != 0 || strcmp(sig, v->signature) != 0)
        {
            TB_FAIL_AT("%s: signature %s, want %s", v->name, sig,
                       v->signature);
            continue;
        }

        m = tb_sigv4_authorization(&example, "20150830T123600Z", buf, n, sh,
                                   authz, sizeof(authz));
        snprintf(want, sizeof(want), "AWS4-HMAC-SHA256 Credential="
                 "AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
                 "SignedHeaders=%s, Signature=%s", sh, v->signature);
        TB_CHECK_STR(authz, want);
        TB_CHECK_INT(m, strlen(want));
    }

    printf("# %zu vectors of the AWS suite\n",
           sizeof(vectors) / sizeof(vectors[0]));
}


TB_TEST(bedrock_model_id_is_encoded_twice)
{
    size_t             n;
    char               buf[1024], sh[128], ph[65];
    tb_sigv4_header_t  h[2];

    static const char  path[] =
        "/model/anthropic.claude-3-5-sonnet-20240620-v1%3A0/invoke";

    h[0].name = "host";
    h[0].name_len = 4;
    h[0].value = "bedrock-runtime.us-east-1.amazonaws.com";
    h[0].value_len = strlen(h[0].value);
    h[1].name = "x-amz-date";
    h[1].name_len = 10;
    h[1].value = "20250101T000000Z";
    h[1].value_len = 16;

    tb_sigv4_sha256_hex("{}", 2, ph);

    n = tb_sigv4_canonical(buf, sizeof(buf), "POST",
                           (const unsigned char *) path, sizeof(path) - 1,
                           NULL, 0, h, 2, ph, sh, sizeof(sh));
    TB_CHECK(n < sizeof(buf));
    TB_CHECK_CONTAINS(buf, "\n/model/anthropic.claude-3-5-sonnet-20240620-"
                           "v1%253A0/invoke\n");
    TB_CHECK_STR(sh, "host;x-amz-date");
}


TB_TEST(refusals)
{
    char               buf[256], sh[64], ph[65];
    tb_sigv4_header_t  h[TB_SIGV4_HEADERS_MAX + 1];
    size_t             i;

    tb_sigv4_sha256_hex("", 0, ph);
    TB_CHECK_STR(ph, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495"
                     "991b7852b855");

    for (i = 0; i <= TB_SIGV4_HEADERS_MAX; i++) {
        h[i].name = "x-a";
        h[i].name_len = 3;
        h[i].value = "v";
        h[i].value_len = 1;
    }

    /* too many headers */
    TB_CHECK(tb_sigv4_canonical(buf, sizeof(buf), "GET",
                                (const unsigned char *) "/", 1, NULL, 0, h,
                                TB_SIGV4_HEADERS_MAX + 1, ph, sh, sizeof(sh))
             == (size_t) -1);

    /* a line break in a value, an empty name */
    h[0].value = "a\r\nx-evil: 1";
    h[0].value_len = strlen(h[0].value);
    TB_CHECK(tb_sigv4_canonical(buf, sizeof(buf), "GET",
                                (const unsigned char *) "/", 1, NULL, 0, h,
                                1, ph, sh, sizeof(sh)) == (size_t) -1);
    h[0].value = "v";
    h[0].value_len = 1;
    h[0].name_len = 0;
    TB_CHECK(tb_sigv4_canonical(buf, sizeof(buf), "GET",
                                (const unsigned char *) "/", 1, NULL, 0, h,
                                1, ph, sh, sizeof(sh)) == (size_t) -1);

    /* a date that is not one */
    TB_CHECK(tb_sigv4_signature(&example, "2015-08-30", "x", 1, buf) != 0);
    TB_CHECK_INT(tb_sigv4_authorization(&example, "20150830T123600Z", "x", 1,
                                        "host", buf, 10), 0);
}


TB_TEST(dates)
{
    char  d[TB_SIGV4_DATE_LEN + 1];

    tb_sigv4_date(1440938160, d);
    TB_CHECK_STR(d, "20150830T123600Z");
    tb_sigv4_date(0, d);
    TB_CHECK_STR(d, "19700101T000000Z");
}


int
main(void)
{
    TB_RUN(aws_test_suite);
    TB_RUN(bedrock_model_id_is_encoded_twice);
    TB_RUN(refusals);
    TB_RUN(dates);

    return tb_test_done();
}
