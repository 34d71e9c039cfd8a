// TLS for the controller's link, switched on by configuration (MINDIO_TLS_CERT, MINDIO_TLS_KEY,
// MINDIO_TLS_CA: all three or none; mindio_adaptor/core/job/tls_config.py reads the same). TLS 1.3 only and
// mutual: each side presents the job's certificate and accepts only a peer whose certificate the job's
// authority signed. Peers are checked against the authority, not a host name: one certificate serves
// every process of the job. Without the configuration the link stays plain TCP with the job's token.
#pragma once
#include <cstddef>
#include <memory>
#include <string>

typedef struct ssl_ctx_st SSL_CTX;
typedef struct ssl_st SSL;

namespace mindio {

struct TlsFiles {
    std::string cert, key, ca;
    bool on() const { return !cert.empty(); }
};

// The files from the environment; throws std::invalid_argument naming what is missing when only some are set.
TlsFiles tls_files_from_env();

class TlsContext {
public:
    // Throws NetError naming the file and OpenSSL's reason when the files cannot be used.
    TlsContext(const TlsFiles& files, bool server);
    ~TlsContext();
    TlsContext(const TlsContext&) = delete;
    TlsContext& operator=(const TlsContext&) = delete;
    SSL_CTX* get() const { return ctx_; }
    bool server() const { return server_; }

private:
    SSL_CTX* ctx_ = nullptr;
    bool server_;
};

// Null when `files` is off.
std::shared_ptr<TlsContext> make_tls_context(const TlsFiles& files, bool server);

enum class IoStatus { Ok, WouldBlock, Closed, Failed };

// A TLS session over a non-blocking socket, which stays the caller's to close. Not thread-safe: the
// caller serialises reads and writes.
class TlsSession {
public:
    TlsSession(const TlsContext& ctx, int fd);
    ~TlsSession();
    TlsSession(const TlsSession&) = delete;
    TlsSession& operator=(const TlsSession&) = delete;

    // The connecting side's handshake, within timeout_ms (the accepting side's runs inside read()).
    bool handshake(int timeout_ms, std::string* error);
    IoStatus read(char* buf, size_t n, size_t* got, std::string* error);
    IoStatus write(const char* data, size_t n, size_t* sent, std::string* error);
    // All of `data` within timeout_ms (ETIMEDOUT in *code when the time ran out).
    bool write_all(const std::string& data, int timeout_ms, std::string* error, int* code = nullptr);
    // Decrypted bytes not read yet: the socket may be quiet while they wait.
    bool buffered() const;

private:
    IoStatus status_of(int rc, std::string* error);
    SSL* ssl_ = nullptr;
    int fd_;
    bool want_write_ = false;  // the last call needs the socket writable to go on
};

}  // namespace mindio
