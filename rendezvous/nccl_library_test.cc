#include "rendezvous/nccl_library.h"

#include <gtest/gtest.h>

namespace mlrun {
namespace {

TEST(NcclLibrary, ALibraryThatIsNotThereSaysWhy) {
  NcclLibrary one({"libmlrun-no-such-nccl.so.2"});
  EXPECT_FALSE(one.loaded());
  EXPECT_EQ(one.error().rfind("cannot load libmlrun-no-such-nccl.so.2: ", 0), 0u) << one.error();
  EXPECT_EQ(one.function<int (*)(int*)>("ncclGetVersion"), nullptr);
  std::string why;
  EXPECT_EQ(one.version(&why), 0);
  EXPECT_EQ(why, one.error());
  NcclLibrary two({"libmlrun-no-such-a.so", "libmlrun-no-such-b.so"});
  EXPECT_FALSE(two.loaded());
  EXPECT_EQ(two.error().rfind(
                "cannot load NCCL (tried libmlrun-no-such-a.so, libmlrun-no-such-b.so): ", 0),
            0u)
      << two.error();
}

TEST(NcclLibrary, TheFirstNameThatLoadsIsTaken) {
  NcclLibrary nccl({"libmlrun-no-such-nccl.so.2", "libnccl.so.2"});
  if (!nccl.loaded()) GTEST_SKIP() << nccl.error();
  EXPECT_EQ(nccl.name(), "libnccl.so.2");
  EXPECT_TRUE(nccl.error().empty());
  std::string why;
  EXPECT_GE(nccl.version(&why), 20000) << why;  // NCCL 2.x, either encoding.
  EXPECT_NE(nccl.function<int (*)(void*)>("ncclGetUniqueId"), nullptr);
  EXPECT_EQ(nccl.symbol("ncclNoSuchFunction"), nullptr);
  EXPECT_EQ(nccl.missing("ncclNoSuchFunction"), "libnccl.so.2 has no ncclNoSuchFunction");
  EXPECT_FALSE(nccl.describe(1).empty());
}

TEST(NcclLibrary, TheResidentCopyIsOne) {
  EXPECT_EQ(&NcclLibrary::resident(), &NcclLibrary::resident());
}

}  // namespace
}  // namespace mlrun
