#pragma once
// The coordinator store's messages over net frames (types 16-31), and the
// catalog its server and clients validate frames against.
#include "net/frame.hpp"

namespace tandem::cluster {

namespace store_msg {
using net::MessageType;
inline constexpr MessageType kSet{16};       // payload: [u32 key size][key][value]
inline constexpr MessageType kGet{17};       // payload: key
inline constexpr MessageType kValue{18};     // reply to get: payload is the value
inline constexpr MessageType kNotFound{19};  // reply to get/check: key(s) not there yet
inline constexpr MessageType kCheck{20};     // payload: key list; kOk if all exist, else kNotFound with the missing ones
// The live membership (cluster/quorum.hpp); each payload a QuorumRequest,
// each answered with kQuorumView (cluster/quorum_messages.hpp).
inline constexpr MessageType kQuorumBeat{21};    // the worker is alive
inline constexpr MessageType kQuorumArrive{22};  // the worker is at a step boundary, asking for the next membership
inline constexpr MessageType kQuorumLeave{23};   // the worker departs cleanly
inline constexpr MessageType kQuorumView{24};    // reply: the membership and any round under way
// The chief asks the store to host the quorum (payload: QuorumHosting); kQuorumView replies.
inline constexpr MessageType kQuorumHost{25};
}  // namespace store_msg

inline constexpr net::MessageName kStoreMessageNames[] = {
    {store_msg::kSet, "store-set"},     {store_msg::kGet, "store-get"},     {store_msg::kValue, "store-value"},
    {store_msg::kNotFound, "store-not-found"}, {store_msg::kCheck, "store-check"},
    {store_msg::kQuorumBeat, "quorum-beat"}, {store_msg::kQuorumArrive, "quorum-arrive"},
    {store_msg::kQuorumLeave, "quorum-leave"}, {store_msg::kQuorumView, "quorum-view"},
    {store_msg::kQuorumHost, "quorum-host"},
};
inline constexpr net::MessageCatalog kStoreMessages{kStoreMessageNames};

}  // namespace tandem::cluster
