#include "kiln/training/data.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>

#include "kiln/core/error.h"
#include "kiln/io/json.h"
#include "toy_model.h"
#include "tests/support.h"

namespace kiln::training {
namespace {

using testing::char_tokenize;
using testing::fresh_dir;
using testing::write_text;

DataOptions toy_options(int64_t max_length) {
  DataOptions o;
  o.max_length = max_length;
  o.pad_token_id = testing::kToyPad;
  o.eos_token_id = testing::kToyEos;
  return o;
}

std::vector<int32_t> row(const Tensor& t, int64_t r) {
  const int32_t* p = t.data<int32_t>() + r * t.dim(1);
  return std::vector<int32_t>(p, p + t.dim(1));
}

TEST(Data, JsonlTextAndPromptCompletion) {
  std::string dir = fresh_dir("data_jsonl");
  write_text(dir + "/d.jsonl",
             "{\"text\": \"ab\"}\n\n{\"prompt\": \"c\", \"completion\": \"de\"}\n");
  Dataset ds = Dataset::from_file(dir + "/d.jsonl", char_tokenize, toy_options(6));
  ASSERT_EQ(ds.size(), 2);
  EXPECT_EQ(ds[0].input_ids, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(ds[0].labels, (std::vector<int32_t>{1, 2}));
  // The prompt gets no loss; the completion ends with EOS.
  EXPECT_EQ(ds[1].input_ids, (std::vector<int32_t>{3, 4, 5, 29}));
  EXPECT_EQ(ds[1].labels, (std::vector<int32_t>{-100, 4, 5, 29}));

  TrainBatch b = collate({&ds[0], &ds[1]}, ds.options());
  EXPECT_EQ(b.input_ids.shape(), (Shape{2, 6}));
  EXPECT_EQ(row(b.input_ids, 0), (std::vector<int32_t>{1, 2, 0, 0, 0, 0}));
  EXPECT_EQ(row(b.attention_mask, 0), (std::vector<int32_t>{1, 1, 0, 0, 0, 0}));
  EXPECT_EQ(row(b.labels, 0), (std::vector<int32_t>{1, 2, -100, -100, -100, -100}));
  EXPECT_EQ(row(b.labels, 1), (std::vector<int32_t>{-100, 4, 5, 29, -100, -100}));
  // After the shift: row 0 predicts "b"; row 1 predicts d, e, EOS.
  EXPECT_EQ(count_label_tokens(b), 1 + 3);
}

TEST(Data, BadLinesNameFileAndLine) {
  std::string dir = fresh_dir("data_bad");
  std::string path = dir + "/d.jsonl";
  write_text(path, "{\"text\": \"ab\"}\n{\"text\": \"cd\"}\n{not json}\n{\"txt\": \"x\"}\n"
                   "{\"prompt\": \"p\"}\n{\"text\": 5}\n{\"text\": \"ef\"}\n");
  try {
    Dataset::from_file(path, char_tokenize, toy_options(8));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.where(), path + ":3");
  }
  DataOptions o = toy_options(8);
  o.skip_bad_lines = true;
  Dataset ds = Dataset::from_file(path, char_tokenize, o);
  EXPECT_EQ(ds.size(), 3);  // lines 1, 2, 7

  // Each kind of bad line reports its own line.
  auto error_line = [&](const std::string& text) {
    write_text(path, text);
    try {
      Dataset::from_file(path, char_tokenize, toy_options(8));
    } catch (const Error& e) {
      return e.where();
    }
    return std::string("(no error)");
  };
  EXPECT_EQ(error_line("{\"text\": \"a\"}\n{\"txt\": \"x\"}\n"), path + ":2");
  EXPECT_EQ(error_line("{\"prompt\": \"p\"}\n"), path + ":1");
  EXPECT_EQ(error_line("\n\n{\"text\": 5}\n"), path + ":3");
  EXPECT_EQ(error_line("[1, 2]\n"), path + ":1");
}

TEST(Data, EmptyDatasetAndMissingFileAreErrors) {
  std::string dir = fresh_dir("data_empty");
  write_text(dir + "/e.jsonl", "\n  \n");
  try {
    Dataset::from_file(dir + "/e.jsonl", char_tokenize, toy_options(8));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.where(), dir + "/e.jsonl");
  }
  write_text(dir + "/e.txt", "");
  EXPECT_THROW(Dataset::from_file(dir + "/e.txt", char_tokenize, toy_options(8)), Error);
  EXPECT_THROW(Dataset::from_file(dir + "/missing.txt", char_tokenize, toy_options(8)), Error);
}

TEST(Data, TxtIsOneExamplePerNonEmptyLine) {
  std::string dir = fresh_dir("data_txt");
  write_text(dir + "/d.txt", "abc\n\nde\r\nf\n");
  Dataset ds = Dataset::from_file(dir + "/d.txt", char_tokenize, toy_options(8));
  ASSERT_EQ(ds.size(), 3);
  EXPECT_EQ(ds[1].input_ids, (std::vector<int32_t>{4, 5}));
}

TEST(Data, TruncationAndLongestPadding) {
  std::vector<TextRecord> recs(2);
  recs[0].text = "abcdefgh";
  recs[1].text = "ab";
  DataOptions o = toy_options(5);
  Dataset ds = Dataset::from_records(recs, char_tokenize, o, "mem");
  EXPECT_EQ(ds[0].input_ids, (std::vector<int32_t>{1, 2, 3, 4, 5}));
  o.padding = "longest";
  Dataset ds2 = Dataset::from_records({recs[1]}, char_tokenize, o, "mem");
  TrainBatch b = collate({&ds2[0]}, o);
  EXPECT_EQ(b.input_ids.shape(), (Shape{1, 2}));
}

TEST(Data, PackingFillsFullBlocksJoinedByEos) {
  std::vector<TextRecord> recs(3);
  recs[0].text = "abc";
  recs[1].text = "de";
  recs[2].text = "fgh";
  DataOptions o = toy_options(4);
  o.packing = true;
  // Stream: a b c EOS d e EOS f g h EOS = 11 tokens -> 2 blocks of 4, remainder dropped.
  Dataset ds = Dataset::from_records(recs, char_tokenize, o, "mem");
  ASSERT_EQ(ds.size(), 2);
  EXPECT_EQ(ds[0].input_ids, (std::vector<int32_t>{1, 2, 3, 29}));
  EXPECT_EQ(ds[1].input_ids, (std::vector<int32_t>{4, 5, 29, 6}));
  TrainBatch b = collate({&ds[0], &ds[1]}, o);
  for (int32_t m : row(b.attention_mask, 1)) EXPECT_EQ(m, 1);
  o.eos_token_id = -1;
  EXPECT_THROW(Dataset::from_records(recs, char_tokenize, o, "mem"), Error);
}

TEST(Data, GoldenTrainBatchCollatesIdentically) {
  // The golden batch: four texts right-padded to 32 with 151643, labels -100 on padding.
  io::Json golden;
  for (const auto& j : test_support::tiny_golden_rows("train"))
    if (j.value("mode", "") == "f32") golden = j;
  ASSERT_FALSE(golden.is_null()) << "no train/f32 row in the golden file";
  std::vector<Example> examples;
  for (size_t i = 0; i < golden["input_ids"].size(); ++i) {
    Example e;
    for (size_t t = 0; t < golden["input_ids"][i].size(); ++t)
      if (golden["attention_mask"][i][t] == 1)
        e.input_ids.push_back(golden["input_ids"][i][t].get<int32_t>());
    e.labels = e.input_ids;
    examples.push_back(e);
  }
  DataOptions o;
  o.max_length = 32;
  o.pad_token_id = 151643;
  Dataset ds(examples, o, "golden");
  DataLoader loader(std::make_shared<Dataset>(ds), 4, /*shuffle=*/false, 0, false);
  TrainBatch b = loader.batch(0, 0);
  for (int64_t i = 0; i < 4; ++i) {
    EXPECT_EQ(io::Json(row(b.input_ids, i)), golden["input_ids"][size_t(i)]);
    EXPECT_EQ(io::Json(row(b.attention_mask, i)), golden["attention_mask"][size_t(i)]);
    EXPECT_EQ(io::Json(row(b.labels, i)), golden["labels"][size_t(i)]);
  }
  EXPECT_EQ(count_label_tokens(b), golden["num_label_tokens"].get<int64_t>());
}

TEST(Data, SeededShuffleAndDropLast) {
  std::vector<Example> ex(10);
  for (int i = 0; i < 10; ++i) ex[size_t(i)] = {{i + 1, i + 1}, {i + 1, i + 1}};
  auto ds = std::make_shared<Dataset>(ex, toy_options(2), "mem");
  DataLoader a(ds, 4, true, 42, false), b(ds, 4, true, 42, false), c(ds, 4, true, 43, false);
  EXPECT_EQ(a.num_batches(), 3);
  EXPECT_EQ(a.epoch_order(0), b.epoch_order(0));  // deterministic
  EXPECT_NE(a.epoch_order(0), a.epoch_order(1));  // reshuffled every epoch
  EXPECT_NE(a.epoch_order(0), c.epoch_order(0));  // depends on the seed
  EXPECT_EQ(a.epoch_order(1), c.epoch_order(0));  // seed + epoch, documented
  auto order = a.epoch_order(0);
  EXPECT_EQ(std::set<int64_t>(order.begin(), order.end()).size(), 10u);  // a permutation
  EXPECT_EQ(a.batch(0, 2).batch_size(), 2);  // last partial batch kept
  DataLoader d(ds, 4, true, 42, true);
  EXPECT_EQ(d.num_batches(), 2);  // drop_last
  DataLoader e(ds, 4, false, 42, false);
  EXPECT_EQ(e.epoch_order(3), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  // The exact permutation is fixed across platforms (own Fisher-Yates over mt19937_64).
  EXPECT_EQ(seeded_permutation(5, 42), seeded_permutation(5, 42));
}

}  // namespace
}  // namespace kiln::training
