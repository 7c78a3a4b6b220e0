#include "rendezvous/endpoint.h"

#include <gtest/gtest.h>

#include <mlrun/rendezvous.hpp>

namespace mlrun {
namespace {

TEST(Endpoint, HostAndPortOrBracketedIpv6) {
  auto e = parse_endpoint("node-1.cluster:29500");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->host, "node-1.cluster");
  EXPECT_EQ(e->port, 29500);
  e = parse_endpoint("10.0.0.7:1");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->host, "10.0.0.7");
  EXPECT_EQ(e->port, 1);
  e = parse_endpoint("[::1]:29500");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->host, "::1");
  EXPECT_EQ(e->port, 29500);
  e = parse_endpoint("[fe80::1%eth0]:65535");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->host, "fe80::1%eth0");
  EXPECT_EQ(e->port, 65535);
}

TEST(Endpoint, RefusesWhatIsNotOneHostAndOnePort) {
  for (const char* bad : {
           "::1:29500",    // unbracketed IPv6: is the last group the port?
           "fe80::1:80",   // the same
           "host",         // no port
           "host:",        // no port
           "[::1]",        // no port
           "[::1]:",       // no port
           "[::1]29500",   // no ':' before the port
           "[::1:29500",   // no ']'
           ":29500",       // no host
           "[]:29500",     // no host
           "host:0",       // port out of range
           "host:65536",   // port out of range
           "host:123456",  // port out of range
           "host:+80",     // not digits only
           "host:-1",      // not digits only
           "host:80x",     // something after the port
           "host: 80",     // a space
           "a:b:80",       // two colons without brackets
           "",
       }) {
    EXPECT_FALSE(parse_endpoint(bad)) << bad;
    std::string host = "untouched";
    int port = -7;
    EXPECT_FALSE(split_endpoint(bad, host, port)) << bad;
    EXPECT_EQ(host, "untouched") << bad;
    EXPECT_EQ(port, -7) << bad;
  }
}

TEST(Endpoint, MakeEndpointIsReadBack) {
  EXPECT_EQ(make_endpoint("10.0.0.7", 29500), "10.0.0.7:29500");
  EXPECT_EQ(make_endpoint("::1", 29500), "[::1]:29500");
  for (const char* host : {"10.0.0.7", "::1", "node-1", "fe80::1%eth0"}) {
    std::string back;
    int port = 0;
    ASSERT_TRUE(split_endpoint(make_endpoint(host, 8080), back, port)) << host;
    EXPECT_EQ(back, host);
    EXPECT_EQ(port, 8080);
  }
}

// The client library reads endpoints by the same rule: an unbracketed IPv6 address is refused at
// once, naming the rule, not tried as host "::1" and port 29500 until the connect timeout.
TEST(Endpoint, TheClientRefusesAnUnbracketedIpv6Address) {
  rendezvous::ClientOptions options;
  options.connect_timeout = std::chrono::milliseconds(300);
  try {
    rendezvous::Client::connect("::1:29500", "token", options);
    ADD_FAILURE() << "connected";
  } catch (const rendezvous::ConnectionError& e) {
    ADD_FAILURE() << "tried to connect: " << e.what();
  } catch (const rendezvous::Error& e) {
    EXPECT_NE(std::string(e.what()).find("not host:port or [v6]:port"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace mlrun
