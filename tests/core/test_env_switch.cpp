// env_switch: the words it takes, the fallback when unset or empty, the refusal of anything else.
#include <gtest/gtest.h>

#include <cstdlib>

#include "core/env_switch.h"
#include "core/error.h"

using namespace hlm;

namespace {
constexpr const char* kName = "HLM_TEST_ENV_SWITCH";
}

TEST(EnvSwitch, WordsFallbackAndRefusal) {
  ::unsetenv(kName);
  EXPECT_TRUE(env_switch(kName, true));
  EXPECT_FALSE(env_switch(kName, false));
  ::setenv(kName, "", 1);
  EXPECT_TRUE(env_switch(kName, true));
  for (const char* on : {"on", "1"}) {
    ::setenv(kName, on, 1);
    EXPECT_TRUE(env_switch(kName, false)) << on;
  }
  for (const char* off : {"off", "0"}) {
    ::setenv(kName, off, 1);
    EXPECT_FALSE(env_switch(kName, true)) << off;
  }
  for (const char* bad : {"yes", "ON ", "2", "false"}) {
    ::setenv(kName, bad, 1);
    try {
      (void)env_switch(kName, true);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Input) << bad;
      EXPECT_NE(std::string(e.what()).find(kName), std::string::npos) << e.what();
    }
  }
  ::unsetenv(kName);
}
