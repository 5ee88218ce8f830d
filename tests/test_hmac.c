// comm/hmac: SHA-256 and HMAC-SHA-256 against the published vectors (FIPS 180-4's examples, the
// million 'a', RFC 4231 cases 1, 2 and 6: a key longer than a block), a message given in parts
// equal to it whole, and hmac_equal.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/hmac.h"

static int failures;

static void expect(const char *what, const uint8_t got[SHA256_BYTES], const char *want_hex) {
    char hex[2 * SHA256_BYTES + 1];
    for (int i = 0; i < SHA256_BYTES; i++) snprintf(hex + 2 * i, 3, "%02x", got[i]);
    int ok = !strcmp(hex, want_hex);
    printf("%s %s: %s\n", ok ? "ok  " : "FAIL", what, hex);
    failures += !ok;
}

static void hmac_whole(const char *key, size_t key_len, const char *msg, uint8_t out[SHA256_BYTES]) {
    size_t len = strlen(msg);
    hmac_sha256(key, key_len, (const void *[]){msg}, &len, 1, out);
}

int main(void) {
    uint8_t d[SHA256_BYTES], e[SHA256_BYTES];
    sha256("abc", 3, d);
    expect("sha256(abc)", d, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    sha256("", 0, d);
    expect("sha256()", d, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"; // 56 bytes: padding spills
    sha256(two, strlen(two), d);
    expect("sha256(448 bits)", d, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    char *million = malloc(1000000);
    memset(million, 'a', 1000000);
    sha256(million, 1000000, d);
    expect("sha256(a x 1000000)", d, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    free(million);

    char key1[20], key6[131];
    memset(key1, 0x0b, sizeof key1);
    memset(key6, 0xaa, sizeof key6);
    hmac_whole(key1, sizeof key1, "Hi There", d);
    expect("RFC 4231 case 1", d, "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
    hmac_whole("Jefe", 4, "what do ya want for nothing?", d);
    expect("RFC 4231 case 2", d, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    hmac_whole(key6, sizeof key6, "Test Using Larger Than Block-Size Key - Hash Key First", d);
    expect("RFC 4231 case 6 (131-byte key)", d, "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
    hmac_whole("", 0, "", d);
    expect("empty key, empty message", d, "b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad");

    const char *msg = "what do ya want for nothing?";
    hmac_sha256("Jefe", 4, (const void *[]){msg, msg + 5, msg + 19}, (size_t[]){5, 14, 9}, 3, e);
    hmac_whole("Jefe", 4, msg, d);
    int same = hmac_equal(d, e);
    e[31] ^= 1;
    int differs = !hmac_equal(d, e);
    printf("%s a message in 3 parts equals it whole; one flipped bit is unequal\n", same && differs ? "ok  " : "FAIL");
    failures += !(same && differs);
    return failures ? 1 : 0;
}
