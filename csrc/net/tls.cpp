#include "net/tls.h"

#ifdef MINDIO_WITH_TLS
#include <openssl/err.h>
#include <openssl/ssl.h>
#endif
#include <poll.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>

#include "common/env.h"
#include "net/socket.h"

namespace mindio {
namespace {

#ifdef MINDIO_WITH_TLS
std::string openssl_reason() {
    unsigned long code = ERR_get_error();
    ERR_clear_error();
    if (code == 0) return "no reason given";
    char text[256];
    ERR_error_string_n(code, text, sizeof text);
    return text;
}

// Waits (bounded) for the socket to be ready for what the session asked; false when the time is over.
bool wait_ready(int fd, bool for_write, std::chrono::steady_clock::time_point deadline) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, static_cast<short>(for_write ? POLLOUT : POLLIN), 0};
    ::poll(&p, 1, static_cast<int>(left.count()));
    return true;
}
#endif

}  // namespace

TlsFiles tls_files_from_env() {
    TlsFiles files{env_string("MINDIO_TLS_CERT"), env_string("MINDIO_TLS_KEY"), env_string("MINDIO_TLS_CA")};
    const bool any = !files.cert.empty() || !files.key.empty() || !files.ca.empty();
    if (!any) return files;
    std::string missing;
    for (auto [name, value] : {std::pair{"MINDIO_TLS_CERT", &files.cert}, {"MINDIO_TLS_KEY", &files.key},
                               {"MINDIO_TLS_CA", &files.ca}}) {
        if (value->empty()) missing += (missing.empty() ? "" : ", ") + std::string(name);
    }
    if (!missing.empty()) {
        throw std::invalid_argument("TLS needs MINDIO_TLS_CERT, MINDIO_TLS_KEY, MINDIO_TLS_CA together; " + missing +
                                    " not set (unset all three for plain TCP)");
    }
    return files;
}

#ifdef MINDIO_WITH_TLS

TlsContext::TlsContext(const TlsFiles& files, bool server) : server_(server) {
    ctx_ = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
    if (!ctx_) throw NetError("TLS: cannot make a context: " + openssl_reason());
    SSL_CTX_set_min_proto_version(ctx_, TLS1_3_VERSION);
    SSL_CTX_set_mode(ctx_, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    // No session tickets: nothing resumes here, and a ticket is one more write inside a read.
    if (server) SSL_CTX_set_num_tickets(ctx_, 0);
#ifdef SSL_OP_IGNORE_UNEXPECTED_EOF
    // A peer whose process ended closes without close_notify: a closed connection, as on plain TCP (the
    // partition rule tells a peer's host answering from a silence), not a TLS error.
    SSL_CTX_set_options(ctx_, SSL_OP_IGNORE_UNEXPECTED_EOF);
#endif
    SSL_CTX_set_verify(ctx_, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
    auto fail = [&](const std::string& what) {
        std::string why = what + ": " + openssl_reason();
        SSL_CTX_free(ctx_);
        ctx_ = nullptr;
        throw NetError("TLS: " + why);
    };
    if (SSL_CTX_load_verify_locations(ctx_, files.ca.c_str(), nullptr) != 1) fail("MINDIO_TLS_CA=" + files.ca);
    if (SSL_CTX_use_certificate_chain_file(ctx_, files.cert.c_str()) != 1) fail("MINDIO_TLS_CERT=" + files.cert);
    if (SSL_CTX_use_PrivateKey_file(ctx_, files.key.c_str(), SSL_FILETYPE_PEM) != 1) fail("MINDIO_TLS_KEY=" + files.key);
    if (SSL_CTX_check_private_key(ctx_) != 1) fail("MINDIO_TLS_CERT and MINDIO_TLS_KEY do not match");
}

TlsContext::~TlsContext() {
    if (ctx_) SSL_CTX_free(ctx_);
}

std::shared_ptr<TlsContext> make_tls_context(const TlsFiles& files, bool server) {
    return files.on() ? std::make_shared<TlsContext>(files, server) : nullptr;
}

TlsSession::TlsSession(const TlsContext& ctx, int fd) : fd_(fd) {
    ssl_ = SSL_new(ctx.get());
    if (!ssl_) throw NetError("TLS: cannot make a session: " + openssl_reason());
    SSL_set_fd(ssl_, fd);
    if (ctx.server()) SSL_set_accept_state(ssl_);
    else SSL_set_connect_state(ssl_);
}

TlsSession::~TlsSession() {
    if (ssl_) SSL_free(ssl_);
}

IoStatus TlsSession::status_of(int rc, std::string* error) {
    const int saved_errno = errno;
    want_write_ = false;
    switch (SSL_get_error(ssl_, rc)) {
        case SSL_ERROR_WANT_READ: return IoStatus::WouldBlock;
        case SSL_ERROR_WANT_WRITE: want_write_ = true; return IoStatus::WouldBlock;
        case SSL_ERROR_ZERO_RETURN: return IoStatus::Closed;
        case SSL_ERROR_SYSCALL: {
            ERR_clear_error();
            if (saved_errno == EAGAIN || saved_errno == EINTR) return IoStatus::WouldBlock;
            if (saved_errno == 0) return IoStatus::Closed;  // the peer closed without close_notify
            *error = std::strerror(saved_errno);
            return IoStatus::Failed;
        }
        default:
            *error = "TLS: " + openssl_reason();
            return IoStatus::Failed;
    }
}

bool TlsSession::handshake(int timeout_ms, std::string* error) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (true) {
        int rc = SSL_do_handshake(ssl_);
        if (rc == 1) return true;
        IoStatus s = status_of(rc, error);
        if (s == IoStatus::Closed) *error = "TLS handshake: the peer closed the connection (not the job's certificate?)";
        if (s != IoStatus::WouldBlock) return false;
        if (!wait_ready(fd_, want_write_, deadline)) {
            *error = "TLS handshake timed out after " + std::to_string(timeout_ms) + " ms";
            return false;
        }
    }
}

IoStatus TlsSession::read(char* buf, size_t n, size_t* got, std::string* error) {
    size_t count = 0;
    int rc = SSL_read_ex(ssl_, buf, n, &count);
    if (rc == 1) {
        *got = count;
        return IoStatus::Ok;
    }
    return status_of(rc, error);
}

IoStatus TlsSession::write(const char* data, size_t n, size_t* sent, std::string* error) {
    size_t count = 0;
    int rc = SSL_write_ex(ssl_, data, n, &count);
    if (rc == 1) {
        *sent = count;
        return IoStatus::Ok;
    }
    return status_of(rc, error);
}

bool TlsSession::write_all(const std::string& data, int timeout_ms, std::string* error, int* code) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    size_t done = 0;
    while (done < data.size()) {
        size_t sent = 0;
        IoStatus s = write(data.data() + done, data.size() - done, &sent, error);
        if (s == IoStatus::Ok) {
            done += sent;
            continue;
        }
        if (s != IoStatus::WouldBlock) {
            if (code) *code = s == IoStatus::Closed ? EPIPE : EPROTO;
            if (s == IoStatus::Closed) *error = "the peer closed the TLS connection";
            return false;
        }
        if (!wait_ready(fd_, want_write_, deadline)) {
            if (code) *code = ETIMEDOUT;
            *error = "send timed out after " + std::to_string(timeout_ms) + " ms";
            return false;
        }
    }
    return true;
}

bool TlsSession::buffered() const { return SSL_pending(ssl_) > 0; }

#else  // built without OpenSSL's headers (setup.py): configuring TLS is an error that says so

TlsContext::TlsContext(const TlsFiles&, bool server) : server_(server) {
    throw NetError("TLS is configured (MINDIO_TLS_*), but this build of mindio_adaptor has no TLS: build it where "
                   "OpenSSL's headers are (Debian: libssl-dev), or unset MINDIO_TLS_CERT, MINDIO_TLS_KEY, MINDIO_TLS_CA");
}
TlsContext::~TlsContext() = default;
std::shared_ptr<TlsContext> make_tls_context(const TlsFiles& files, bool server) {
    return files.on() ? std::make_shared<TlsContext>(files, server) : nullptr;
}
TlsSession::TlsSession(const TlsContext&, int fd) : fd_(fd) {}
TlsSession::~TlsSession() = default;
IoStatus TlsSession::status_of(int, std::string*) { return IoStatus::Failed; }
bool TlsSession::handshake(int, std::string*) { return false; }
IoStatus TlsSession::read(char*, size_t, size_t*, std::string*) { return IoStatus::Failed; }
IoStatus TlsSession::write(const char*, size_t, size_t*, std::string*) { return IoStatus::Failed; }
bool TlsSession::write_all(const std::string&, int, std::string*, int*) { return false; }
bool TlsSession::buffered() const { return false; }

#endif

}  // namespace mindio
