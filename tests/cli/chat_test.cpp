// kiln chat: --prompt answers once; interactive mode keeps a conversation, /reset and /exit work.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include "tests/support.h"

namespace {

std::string run(const std::string& cmd, int* status) {
  return kiln::test_support::run_command(cmd + " 2>&1", status);
}

const std::string kChat = std::string(KILN_BINARY_DIR) + "/tools/cli/kiln chat " +
                          KILN_SHARED_DIR + "/testdata/models/tiny --max-new-tokens 3 --dtype f32";

TEST(CliChat, PromptAnswersOnceAndInteractiveCommandsWork) {
  int status = 0;
  std::string once = run(kChat + " --prompt Hello", &status);
  EXPECT_EQ(status, 0) << once;
  EXPECT_FALSE(once.empty());
  std::string session = run("printf 'hello\\n/reset\\nagain\\n/exit\\nnever\\n' | " + kChat, &status);
  EXPECT_EQ(status, 0) << session;
  EXPECT_NE(session.find("(conversation cleared)"), std::string::npos) << session;
  // Three prompts are shown before /exit ends the session; "never" is not answered.
  size_t prompts = 0;
  for (size_t i = session.find("> "); i != std::string::npos; i = session.find("> ", i + 2)) ++prompts;
  EXPECT_EQ(prompts, 4u) << session;
}

TEST(CliChat, FolderWithoutTokenizerIsAnError) {
  int status = 0;
  std::string out = run(std::string(KILN_BINARY_DIR) + "/tools/cli/kiln chat /nonexistent --prompt x",
                        &status);
  EXPECT_NE(status, 0);
  EXPECT_NE(out.find("/nonexistent"), std::string::npos) << out;
}

}  // namespace
