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
}  // namespace store_msg

inline constexpr net::MessageName kStoreMessageNames[] = {
    {store_msg::kSet, "store-set"},     {store_msg::kGet, "store-get"},     {store_msg::kValue, "store-value"},
    {store_msg::kNotFound, "store-not-found"}, {store_msg::kCheck, "store-check"},
};
inline constexpr net::MessageCatalog kStoreMessages{kStoreMessageNames};

}  // namespace tandem::cluster
