// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// CURVE encryption of every ZeroMQ socket (docs/THREAT_MODEL.md, docs/configuration.md
// `curve_key_file`). The cluster shares one CURVE key pair: every node's receive socket is
// a CURVE server with the cluster's secret key, and every connection a CURVE client that
// presents the cluster's key pair and expects the cluster's public key from the other end.
// The public key is derived from the secret key and never sent in clear (CURVE's
// handshake does not send the server's key at all), so a peer without the key file
// cannot complete a handshake: its connection carries nothing, and what travels is
// encrypted and authenticated (CurveZMQ: Curve25519, XSalsa20-Poly1305).
//
// The key file: the secret key in Z85 (40 characters) on its first line that is not
// empty and does not start with '#'. It must be readable by its owner only (mode 0600 or
// stricter): a file others can read is refused.
#ifndef PS_TRANSPORT_CURVE_H_
#define PS_TRANSPORT_CURVE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "ps/status.h"

namespace zmq {
class context_t;
class socket_t;
}  // namespace zmq

namespace ps {

struct CurveKeys {
  std::string public_z85;  // 40 characters
  std::string secret_z85;  // 40 characters
};

// True when this libzmq was built with CURVE (libsodium).
bool CurveAvailable();

// Reads and checks the cluster's key file. kInvalidArgument for a malformed key,
// kPermissionDenied for a file others may read, kIoError when it cannot be read,
// kFailedPrecondition when libzmq has no CURVE.
StatusOr<CurveKeys> LoadCurveKeys(const std::string& path);

// Answers ZeroMQ's authentication requests (ZAP) of one context: a CURVE client is
// admitted only when it presents the cluster's public key (which proves, through CURVE's
// handshake, that it holds the secret key). Without it libzmq would admit any client key.
// Destroy it before its context is terminated.
class CurveAuthenticator {
 public:
  // Binds the context's ZAP endpoint and starts the thread that answers it.
  static StatusOr<std::unique_ptr<CurveAuthenticator>> Start(zmq::context_t* ctx,
                                                             const CurveKeys& keys);
  ~CurveAuthenticator();
  // Handshakes refused so far (a client with another key).
  uint64_t refused() const { return refused_.load(); }

 private:
  CurveAuthenticator() = default;
  void Loop();
  std::unique_ptr<zmq::socket_t> socket_;
  std::string key_;  // the cluster's public key, 32 raw bytes
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> refused_{0};
  std::thread thread_;
};

// Writes a new key file at `path` (created with mode 0600; an existing file is refused:
// kAlreadyExists). Returns the keys.
StatusOr<CurveKeys> WriteNewCurveKeyFile(const std::string& path);

}  // namespace ps

#endif  // PS_TRANSPORT_CURVE_H_
