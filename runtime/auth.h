/*
 * auth: the shared key (PDX_AUTH_KEY, PDX_AUTH_KEY_FILE), the handshake's
 * challenge and proofs, and the sealing of every control frame after it.
 * Built on libsodium; without it (PDX_HAVE_SODIUM unset) a key is refused
 * with PDX_ERR_UNSUPPORTED. Pure but for pdx_auth_load (reads the key file)
 * and pdx_auth_nonce (the system's random bytes).
 *
 * The exchange, connector C and acceptor A (ctrl_msg.c runs it):
 *
 *   C -> A  AUTH 1 {version, nc}
 *   A -> C  AUTH 2 {version, na, MAC(k, "A" nc na)}
 *   C -> A  AUTH 3 {version, MAC(k, "C" nc na)}
 *
 * MAC is HMAC-SHA-512-256 (crypto_auth) under k, the key derived from the
 * configured bytes (keyed hashing, no key stretching: the configured key
 * must be random, since one exchange lets anyone test guesses offline); the
 * nonces are 32 random bytes, fresh per connection,
 * so no proof is worth anything on another connection. The acceptor proves
 * first; each side checks the other's proof before it sends anything more. From AUTH 3
 * on, every frame each way is sealed with ChaCha20-Poly1305 (IETF) under a
 * key per direction derived from k, nc and na, its 12-byte header the
 * associated data and the frame's number in its direction the nonce: a
 * frame changed, replayed, reordered, dropped or made up by anyone without
 * k fails to open.
 */
#ifndef PDX_AUTH_H
#define PDX_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pdx/pdx.h"
#include "wire.h"

#define PDX_AUTH_KEY_BYTES   32u
#define PDX_AUTH_NONCE_BYTES PDX_WIRE_NONCE_SIZE
#define PDX_AUTH_MAC_BYTES   PDX_WIRE_MAC_SIZE
#define PDX_AUTH_KEY_MIN     16u   /* configured key bytes, at least */
#define PDX_AUTH_KEY_MAX     4096u /* ... at most */
#define PDX_SEAL_TAG_BYTES   PDX_WIRE_SEAL_TAG

typedef struct pdx_auth_key {
    bool    set;
    uint8_t k[PDX_AUTH_KEY_BYTES];
} pdx_auth_key_t;

/* The two directions of one connection's sealing. */
typedef struct pdx_seal {
    uint8_t  tx_key[PDX_AUTH_KEY_BYTES], rx_key[PDX_AUTH_KEY_BYTES];
    uint64_t tx_seq, rx_seq;
} pdx_seal_t;

/* True where pdx was built with libsodium. */
bool pdx_auth_available(void);

/*
 * The engine's key from cfg->auth_key or the file cfg->auth_key_file (at
 * most one of them; a trailing newline of the file is not part of the key),
 * PDX_AUTH_KEY_MIN..PDX_AUTH_KEY_MAX bytes. Neither set: key->set false.
 * PDX_ERR_INVALID (both, too short or long), PDX_ERR_IO (the file) or
 * PDX_ERR_UNSUPPORTED (no libsodium), with a message naming the variable.
 */
pdx_status_t pdx_auth_load(const pdx_config_t *cfg, pdx_auth_key_t *key);

/* The key from raw bytes, however many (pdx_auth_load's last step). */
pdx_status_t pdx_auth_derive(const void *bytes, size_t len, pdx_auth_key_t *key);

/* n random bytes; false when the system has none to give. */
bool pdx_auth_nonce(uint8_t *out, size_t n);

/* The proof of role 'C' or 'A' over the connection's two nonces. */
void pdx_auth_proof(const pdx_auth_key_t *key, char role, const uint8_t nc[PDX_AUTH_NONCE_BYTES],
                    const uint8_t na[PDX_AUTH_NONCE_BYTES], uint8_t mac[PDX_AUTH_MAC_BYTES]);

/* Whether mac is role's proof (in constant time). */
bool pdx_auth_check(const pdx_auth_key_t *key, char role, const uint8_t nc[PDX_AUTH_NONCE_BYTES],
                    const uint8_t na[PDX_AUTH_NONCE_BYTES], const uint8_t mac[PDX_AUTH_MAC_BYTES]);

/* The sealing keys of one connection; connector says which side we are. */
void pdx_seal_init(pdx_seal_t *s, const pdx_auth_key_t *key, bool connector,
                   const uint8_t nc[PDX_AUTH_NONCE_BYTES], const uint8_t na[PDX_AUTH_NONCE_BYTES]);

/*
 * Seal the frame (a whole frame, header included, len bytes) as the next of
 * our direction into out, which takes len + PDX_WIRE_SEAL_EXTRA bytes: a
 * SEALED frame. Its length is returned.
 */
size_t pdx_seal(pdx_seal_t *s, const void *frame, size_t len, uint8_t *out);

/*
 * Open, in place, the SEALED frame of len bytes (header included) as the
 * next of the peer's direction: *inner_p is where the frame it holds begins,
 * *inner_len_p its length. False: it was not sealed by the peer as that
 * frame (the frame's bytes may be clobbered then: fail the peer).
 */
bool pdx_unseal(pdx_seal_t *s, uint8_t *frame, size_t len, uint8_t **inner_p,
                size_t *inner_len_p);

/* Forget a key or a connection's sealing (memory that held them is wiped). */
void pdx_auth_wipe(void *p, size_t len);

#endif /* PDX_AUTH_H */
