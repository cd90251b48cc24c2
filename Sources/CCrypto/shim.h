// Only SHA-256 from OpenSSL's libcrypto: tokens are stored as one-way hashes.
#include <openssl/sha.h>
#include <openssl/crypto.h>
