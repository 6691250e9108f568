#pragma once
// Reply: how a service answers one request (docs/protocol.md § Messages) without knowing the
// connection. It holds the client weakly and the request's id: a reply to a client that went
// away is dropped, and nothing keeps a closed connection alive. Every request gets exactly one
// ok() or error(), after any number of event()s. Copyable; io thread only.
#include "core/result.hpp"
#include "daemon/client.hpp"

#include <nlohmann/json.hpp>

#include <memory>
#include <string_view>

#include <sys/types.h>

namespace ktune::daemon {

class Reply {
public:
  Reply(const std::shared_ptr<Client>& client, nlohmann::json id);

  void ok(const nlohmann::json& result) const;
  void error(const Error& error) const;
  // ok() of the value or error() of the error.
  void answer(const Result<nlohmann::json>& result) const;
  // A progress event ("event":"progress") of this request.
  void event(std::string_view name, const nlohmann::json& data) const;

  // The client closed its connection: nobody reads what is sent.
  [[nodiscard]] bool gone() const { return m_client.expired(); }
  // The uid of the requesting process: whose quota a job it creates is charged to.
  [[nodiscard]] uid_t uid() const { return m_uid; }
  [[nodiscard]] const nlohmann::json& id() const { return m_id; }

private:
  std::weak_ptr<Client> m_client;
  nlohmann::json m_id;
  uid_t m_uid = 0;
};

} // namespace ktune::daemon
