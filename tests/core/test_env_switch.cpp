// env_switch: the words it takes, the fallback when unset or empty, the refusal of anything else; OverridableSwitch:
// the environment read once, a set value winning until set(-1).
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

TEST(OverridableSwitch, SetValueWinsUntilReset) {
  ::setenv(kName, "off", 1);
  OverridableSwitch sw{kName, true};
  EXPECT_FALSE(sw.on());
  ::setenv(kName, "on", 1);
  EXPECT_FALSE(sw.on());  // read once
  sw.set(1);
  EXPECT_TRUE(sw.on());
  sw.set(0);
  EXPECT_FALSE(sw.on());
  sw.set(7);
  EXPECT_TRUE(sw.on());
  sw.set(-1);
  EXPECT_FALSE(sw.on());  // the environment's answer as first read
  ::unsetenv(kName);
  OverridableSwitch fallback{kName, true};
  EXPECT_TRUE(fallback.on());
  ::setenv(kName, "maybe", 1);
  OverridableSwitch bad{kName, false};
  EXPECT_THROW((void)bad.on(), Error);
  bad.set(1);
  EXPECT_TRUE(bad.on());  // a set value needs no environment
  ::unsetenv(kName);
}
