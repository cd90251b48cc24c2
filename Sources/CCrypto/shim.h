// OpenSSL's libcrypto: SHA-256 (tokens are stored as one-way hashes), Ed25519 and the
// random source (a family hub's keys, NATS nkeys).
#include <openssl/sha.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
