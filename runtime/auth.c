/* The shared key, the handshake's proofs and the sealing of control frames (auth.h). */
#include "auth.h"
#include "wire_buf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"

#ifdef PDX_HAVE_SODIUM
#include <sodium.h>

_Static_assert(crypto_auth_BYTES == PDX_AUTH_MAC_BYTES, "HMAC-SHA-512-256 size");
_Static_assert(crypto_auth_KEYBYTES == PDX_AUTH_KEY_BYTES, "crypto_auth key size");
_Static_assert(crypto_aead_chacha20poly1305_ietf_KEYBYTES == PDX_AUTH_KEY_BYTES, "AEAD key");
_Static_assert(crypto_aead_chacha20poly1305_ietf_ABYTES == PDX_SEAL_TAG_BYTES, "AEAD tag");
#endif

#define KEY_CONTEXT  "pdx auth key 1"
#define SEAL_CONTEXT "pdx seal 1"

bool pdx_auth_available(void)
{
#ifdef PDX_HAVE_SODIUM
    return true;
#else
    return false;
#endif
}

void pdx_auth_wipe(void *p, size_t len)
{
#ifdef PDX_HAVE_SODIUM
    sodium_memzero(p, len);
#else
    volatile uint8_t *v = p;

    while (len--)
        *v++ = 0;
#endif
}

pdx_status_t pdx_auth_derive(const void *bytes, size_t len, pdx_auth_key_t *key)
{
#ifdef PDX_HAVE_SODIUM
    crypto_generichash_state h;

    if (sodium_init() < 0) {
        pdx_error("libsodium does not start");
        return PDX_ERR_IO;
    }
    crypto_generichash_init(&h, NULL, 0, sizeof(key->k));
    crypto_generichash_update(&h, (const uint8_t *)KEY_CONTEXT, sizeof(KEY_CONTEXT));
    crypto_generichash_update(&h, bytes, len);
    crypto_generichash_final(&h, key->k, sizeof(key->k));
    pdx_auth_wipe(&h, sizeof(h));
    key->set = true;
    return PDX_OK;
#else
    (void)bytes;
    (void)len;
    (void)key;
    return PDX_ERR_UNSUPPORTED;
#endif
}

/* The key file's bytes into buf (cap bytes): their count, or -1 (logged). */
static ssize_t read_key_file(const char *path, uint8_t *buf, size_t cap)
{
    struct stat st;
    ssize_t n = 0, r = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);

    if (fd < 0) {
        pdx_error("PDX_AUTH_KEY_FILE=%s: %s", path, strerror(errno));
        return -1;
    }
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        pdx_error("PDX_AUTH_KEY_FILE=%s: not a regular file", path);
        close(fd);
        return -1;
    }
    if (st.st_mode & (S_IRWXG | S_IRWXO))
        pdx_warn("PDX_AUTH_KEY_FILE=%s: others than its owner may read it (mode %03o)", path,
                 (unsigned)(st.st_mode & 0777));
    while ((size_t)n < cap && ((r = read(fd, buf + n, cap - (size_t)n)) > 0 ||
                               (r < 0 && errno == EINTR)))
        n += r > 0 ? r : 0;
    if (r < 0) {
        pdx_error("PDX_AUTH_KEY_FILE=%s: %s", path, strerror(errno));
        n = -1;
    } else if ((size_t)n == cap) {
        pdx_error("PDX_AUTH_KEY_FILE=%s: longer than %u bytes", path, PDX_AUTH_KEY_MAX);
        n = -1;
    }
    close(fd);
    return n;
}

pdx_status_t pdx_auth_load(const pdx_config_t *cfg, pdx_auth_key_t *key)
{
    uint8_t buf[PDX_AUTH_KEY_MAX + 1];
    const char *what = "PDX_AUTH_KEY";
    pdx_status_t st;
    size_t len;

    memset(key, 0, sizeof(*key));
    if (!cfg->auth_key[0] && !cfg->auth_key_file[0])
        return PDX_OK;
    if (cfg->auth_key[0] && cfg->auth_key_file[0]) {
        pdx_error("PDX_AUTH_KEY and PDX_AUTH_KEY_FILE are both set: give the key one way");
        return PDX_ERR_INVALID;
    }
    if (!pdx_auth_available()) {
        pdx_error("%s is set but pdx was built without libsodium: no authentication",
                  cfg->auth_key[0] ? "PDX_AUTH_KEY" : "PDX_AUTH_KEY_FILE");
        return PDX_ERR_UNSUPPORTED;
    }
    if (cfg->auth_key[0]) {
        len = strlen(cfg->auth_key);
        memcpy(buf, cfg->auth_key, len);
    } else {
        ssize_t n = read_key_file(cfg->auth_key_file, buf, sizeof(buf));

        if (n < 0)
            return PDX_ERR_IO;
        len = (size_t)n;
        if (len && buf[len - 1] == '\n')
            len--;
        if (len && buf[len - 1] == '\r')
            len--;
        what = "PDX_AUTH_KEY_FILE";
    }
    if (len < PDX_AUTH_KEY_MIN) {
        pdx_error("%s: the key has %zu bytes; it needs at least %u", what, len,
                  PDX_AUTH_KEY_MIN);
        st = PDX_ERR_INVALID;
    } else {
        st = pdx_auth_derive(buf, len, key);
    }
    pdx_auth_wipe(buf, sizeof(buf));
    return st;
}

bool pdx_auth_nonce(uint8_t *out, size_t n)
{
    size_t got = 0;

    while (got < n) {
        ssize_t r = getrandom(out + got, n - got, 0);

        if (r < 0 && errno != EINTR)
            return false;
        got += r > 0 ? (size_t)r : 0;
    }
    return true;
}

#ifdef PDX_HAVE_SODIUM
static void proof(const pdx_auth_key_t *key, char role, const uint8_t *nc, const uint8_t *na,
                  uint8_t *mac)
{
    crypto_auth_hmacsha512256_state h;
    const uint8_t r = (uint8_t)role;

    crypto_auth_hmacsha512256_init(&h, key->k, sizeof(key->k));
    crypto_auth_hmacsha512256_update(&h, &r, 1);
    crypto_auth_hmacsha512256_update(&h, nc, PDX_AUTH_NONCE_BYTES);
    crypto_auth_hmacsha512256_update(&h, na, PDX_AUTH_NONCE_BYTES);
    crypto_auth_hmacsha512256_final(&h, mac);
    pdx_auth_wipe(&h, sizeof(h));
}
#endif

void pdx_auth_proof(const pdx_auth_key_t *key, char role, const uint8_t nc[PDX_AUTH_NONCE_BYTES],
                    const uint8_t na[PDX_AUTH_NONCE_BYTES], uint8_t mac[PDX_AUTH_MAC_BYTES])
{
#ifdef PDX_HAVE_SODIUM
    proof(key, role, nc, na, mac);
#else
    (void)key, (void)role, (void)nc, (void)na;
    memset(mac, 0, PDX_AUTH_MAC_BYTES);
#endif
}

bool pdx_auth_check(const pdx_auth_key_t *key, char role, const uint8_t nc[PDX_AUTH_NONCE_BYTES],
                    const uint8_t na[PDX_AUTH_NONCE_BYTES], const uint8_t mac[PDX_AUTH_MAC_BYTES])
{
#ifdef PDX_HAVE_SODIUM
    uint8_t want[PDX_AUTH_MAC_BYTES];
    bool ok;

    proof(key, role, nc, na, want);
    ok = sodium_memcmp(want, mac, sizeof(want)) == 0;
    pdx_auth_wipe(want, sizeof(want));
    return ok;
#else
    (void)key, (void)role, (void)nc, (void)na, (void)mac;
    return false;
#endif
}

void pdx_seal_init(pdx_seal_t *s, const pdx_auth_key_t *key, bool connector,
                   const uint8_t nc[PDX_AUTH_NONCE_BYTES], const uint8_t na[PDX_AUTH_NONCE_BYTES])
{
    memset(s, 0, sizeof(*s));
#ifdef PDX_HAVE_SODIUM
    uint8_t both[2 * PDX_AUTH_KEY_BYTES];
    crypto_generichash_state h;

    /* keyed BLAKE2b of the nonces: the connector's key, then the acceptor's */
    crypto_generichash_init(&h, key->k, sizeof(key->k), sizeof(both));
    crypto_generichash_update(&h, (const uint8_t *)SEAL_CONTEXT, sizeof(SEAL_CONTEXT));
    crypto_generichash_update(&h, nc, PDX_AUTH_NONCE_BYTES);
    crypto_generichash_update(&h, na, PDX_AUTH_NONCE_BYTES);
    crypto_generichash_final(&h, both, sizeof(both));
    memcpy(s->tx_key, both + (connector ? 0 : PDX_AUTH_KEY_BYTES), PDX_AUTH_KEY_BYTES);
    memcpy(s->rx_key, both + (connector ? PDX_AUTH_KEY_BYTES : 0), PDX_AUTH_KEY_BYTES);
    pdx_auth_wipe(both, sizeof(both));
    pdx_auth_wipe(&h, sizeof(h));
#else
    (void)key, (void)connector, (void)nc, (void)na;
#endif
}

#ifdef PDX_HAVE_SODIUM
static void seq_nonce(uint64_t seq, uint8_t nonce[crypto_aead_chacha20poly1305_ietf_NPUBBYTES])
{
    memset(nonce, 0, crypto_aead_chacha20poly1305_ietf_NPUBBYTES);
    for (unsigned i = 0; i < 8; i++)
        nonce[4 + i] = (uint8_t)(seq >> (8 * i));
}
#endif

size_t pdx_seal(pdx_seal_t *s, const void *frame, size_t len, uint8_t *out)
{
    pdx_wire_wr_t w = {out, 0};
    size_t body = len + PDX_SEAL_TAG_BYTES;

    pdx_wire_wr_u32(&w, PDX_WIRE_MAGIC);
    pdx_wire_wr_u16(&w, PDX_WIRE_SEALED);
    pdx_wire_wr_u16(&w, 0);
    pdx_wire_wr_u32(&w, (uint32_t)body);
#ifdef PDX_HAVE_SODIUM
    uint8_t nonce[crypto_aead_chacha20poly1305_ietf_NPUBBYTES];

    seq_nonce(s->tx_seq++, nonce);
    crypto_aead_chacha20poly1305_ietf_encrypt(out + PDX_WIRE_HEADER_SIZE, NULL, frame, len, out,
                                              PDX_WIRE_HEADER_SIZE, NULL, nonce, s->tx_key);
#else
    (void)s;
    memcpy(out + PDX_WIRE_HEADER_SIZE, frame, len);
#endif
    return PDX_WIRE_HEADER_SIZE + body;
}

bool pdx_unseal(pdx_seal_t *s, uint8_t *frame, size_t len, uint8_t **inner_p,
                size_t *inner_len_p)
{
#ifdef PDX_HAVE_SODIUM
    uint8_t nonce[crypto_aead_chacha20poly1305_ietf_NPUBBYTES];
    uint8_t *c = frame + PDX_WIRE_HEADER_SIZE;
    unsigned long long n = 0;

    if (len < PDX_WIRE_HEADER_SIZE + PDX_SEAL_TAG_BYTES)
        return false;
    seq_nonce(s->rx_seq, nonce);
    if (crypto_aead_chacha20poly1305_ietf_decrypt(c, &n, NULL, c, len - PDX_WIRE_HEADER_SIZE,
                                                  frame, PDX_WIRE_HEADER_SIZE, nonce,
                                                  s->rx_key) != 0)
        return false;
    s->rx_seq++;
    *inner_p = c;
    *inner_len_p = (size_t)n;
    return true;
#else
    (void)s, (void)frame, (void)len, (void)inner_p, (void)inner_len_p;
    return false;
#endif
}
