#include "daemon/reply.hpp"

#include "core/protocol.hpp"

namespace ktune::daemon {

Reply::Reply(const std::shared_ptr<Client>& client, nlohmann::json id)
    : m_client(client), m_id(std::move(id)), m_uid(client ? client->peer().uid : 0) {}

void Reply::ok(const nlohmann::json& result) const {
  if (auto client = m_client.lock()) client->send(protocol::encode_ok(m_id, result));
}

void Reply::error(const Error& error) const {
  if (auto client = m_client.lock()) client->send(protocol::encode_error(m_id, error));
}

void Reply::answer(const Result<nlohmann::json>& result) const {
  if (result) {
    ok(*result);
  } else {
    error(result.error());
  }
}

void Reply::event(std::string_view name, const nlohmann::json& data) const {
  if (auto client = m_client.lock()) client->send(protocol::encode_event(m_id, name, data));
}

} // namespace ktune::daemon
