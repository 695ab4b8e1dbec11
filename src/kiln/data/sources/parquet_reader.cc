// Kiln's Parquet module (libkiln_parquet.so): the reader on Apache Arrow's C++ library. It is
// a module loaded on first use (parquet_reader.h), not linked into kiln, so that Arrow's 60 MB
// of libraries load only for runs that read Parquet and a kiln without them (make gpu-bundle)
// still runs everything else. Built from this file and base/status.cc alone.
#include "kiln/data/sources/parquet_reader.h"

#include <algorithm>
#include <exception>
#include <string_view>
#include <vector>

#include <arrow/array.h>
#include <arrow/io/file.h>
#include <arrow/memory_pool.h>
#include <arrow/record_batch.h>
#include <arrow/type.h>
#include <parquet/arrow/reader.h>
#include <parquet/file_reader.h>
#include <parquet/metadata.h>
#include <parquet/properties.h>
#include <parquet/schema.h>

namespace kiln::data {
namespace {

// Arrow's messages can carry a newline (context lines); ours are one line.
std::string one_line(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  return s;
}

// Rows decoded at a time: memory is one batch of text plus a page and the 1 MiB read buffer,
// not a whole row group, which writers with default settings make up to a million rows long.
constexpr int64_t kBatchRows = 1024;

bool is_text_type(arrow::Type::type id) {
  return id == arrow::Type::STRING || id == arrow::Type::LARGE_STRING || id == arrow::Type::STRING_VIEW;
}

// Row i of a string-like array; a null is an empty document (a dataset row whose text is
// missing contributes nothing rather than stopping the run).
template <typename ArrayType>
void copy_text(const arrow::Array& array, int64_t i, std::string* text) {
  const auto& a = static_cast<const ArrayType&>(array);
  if (a.IsNull(i)) {
    text->clear();
    return;
  }
  std::string_view v = a.GetView(i);
  text->assign(v.data(), v.size());
}

class ParquetReader final : public DocumentReader {
 public:
  ParquetReader(std::string path, std::string column, std::unique_ptr<parquet::arrow::FileReader> reader, int leaf)
      : path_(std::move(path)), column_(std::move(column)), reader_(std::move(reader)), leaf_(leaf) {
    auto metadata = reader_->parquet_reader()->metadata();
    group_start_.push_back(0);
    for (int g = 0; g < metadata->num_row_groups(); ++g) {
      group_start_.push_back(group_start_.back() + metadata->RowGroup(g)->num_rows());
    }
  }

  Result<bool> next(std::string* text) override {
    for (;;) {
      if (values_ && row_in_values_ < values_->length()) {
        switch (values_->type_id()) {
          case arrow::Type::STRING: copy_text<arrow::StringArray>(*values_, row_in_values_, text); break;
          case arrow::Type::LARGE_STRING: copy_text<arrow::LargeStringArray>(*values_, row_in_values_, text); break;
          case arrow::Type::STRING_VIEW: copy_text<arrow::StringViewArray>(*values_, row_in_values_, text); break;
          default:
            return internal_error("{}: row group {}: column \"{}\" was read as {}", path_, group_, column_,
                                  values_->type()->ToString());
        }
        ++row_in_values_;
        ++position_;
        return true;
      }
      values_.reset();
      if (batches_) {
        KILN_RETURN_IF_ERROR(read_batch());  // the group's next batch, or the group's end
        continue;
      }
      if (next_group_ >= num_groups()) return false;
      KILN_RETURN_IF_ERROR(open_group(next_group_, pending_offset_));
      pending_offset_ = 0;
    }
  }

  // Within the open row group skipping decodes and drops batches; beyond it, whole row
  // groups are passed over by their row counts in the footer, never read, and the row group
  // where the skip lands is opened when next() needs it.
  Status skip(int64_t n) override {
    if (n < 0) return invalid_argument("{}: cannot skip {} documents (negative)", path_, n);
    const int64_t target = position_ + n;
    if (target > num_documents()) {
      const int64_t from = position_;
      batches_.reset();  // at the end, as a JSONL reader is after reading to it
      values_.reset();
      next_group_ = num_groups();
      position_ = num_documents();
      return invalid_argument("{}: skipping {} documents from document {} is out of range: the file has {} documents",
                              path_, n, from, num_documents());
    }
    if ((batches_ || values_) && target < group_start_[group_ + 1]) {
      KILN_RETURN_IF_ERROR(drop(target - position_));
    } else {
      batches_.reset();
      values_.reset();
      int g = 0;
      while (g < num_groups() && group_start_[g + 1] <= target) ++g;  // the group holding `target`
      next_group_ = g;
      pending_offset_ = g < num_groups() ? target - group_start_[g] : 0;
    }
    position_ = target;
    return ok_status();
  }

  int64_t num_documents() const override { return group_start_.back(); }

 private:
  int num_groups() const { return static_cast<int>(group_start_.size()) - 1; }

  Status error(const std::string& what) const {
    return data_loss("{}: row group {} of {} (rows {} to {}): cannot read column \"{}\" at row {} (corrupt or "
                     "truncated?): {}", path_, group_, num_groups(), group_start_[group_], group_start_[group_ + 1] - 1,
                     column_, group_start_[group_] + batch_row_, one_line(what));
  }

  // Starts reading row group g's text column (only that column: the others are never read
  // or decompressed) and moves `offset` rows into it.
  Status open_group(int g, int64_t offset) {
    group_ = g;
    next_group_ = g + 1;
    batch_row_ = 0;
    arrow::Result<std::unique_ptr<arrow::RecordBatchReader>> batches;
    try {
      batches = reader_->GetRecordBatchReader({g}, {leaf_});
    } catch (const std::exception& e) {  // parquet:: code can throw ParquetException
      batches = arrow::Status::IOError(e.what());
    }
    if (!batches.ok()) return error(batches.status().message());
    batches_ = std::move(batches).ValueUnsafe();
    return drop(offset);
  }

  // The open group's next batch into values_; at the group's end, closes the group.
  Status read_batch() {
    std::shared_ptr<arrow::RecordBatch> batch;
    arrow::Status status;
    try {
      status = batches_->ReadNext(&batch);
    } catch (const std::exception& e) {
      status = arrow::Status::IOError(e.what());
    }
    if (!status.ok()) return error(status.message());
    if (!batch) {
      batches_.reset();
      const int64_t rows = group_start_[group_ + 1] - group_start_[group_];
      if (batch_row_ != rows) return error(fmt::format("it ends after {} of its {} rows", batch_row_, rows));
      return ok_status();
    }
    values_ = batch->column(0);
    row_in_values_ = 0;
    batch_row_ += values_->length();
    return ok_status();
  }

  // Moves `rows` rows on inside the open group.
  Status drop(int64_t rows) {
    while (rows > 0) {
      if (!values_ || row_in_values_ == values_->length()) {
        values_.reset();
        if (!batches_) return internal_error("{}: row group {}: skipped past its end", path_, group_);
        KILN_RETURN_IF_ERROR(read_batch());
        continue;
      }
      int64_t take = std::min(rows, values_->length() - row_in_values_);
      row_in_values_ += take;
      rows -= take;
    }
    return ok_status();
  }

  std::string path_, column_;
  std::unique_ptr<parquet::arrow::FileReader> reader_;
  int leaf_;                            // the column's index among the file's leaf columns
  std::vector<int64_t> group_start_;    // first row of each row group, then the row count
  int group_ = -1;                      // the open row group
  std::unique_ptr<arrow::RecordBatchReader> batches_;  // its batches still to read, or null
  int64_t batch_row_ = 0;               // rows of the open group read into batches so far
  std::shared_ptr<arrow::Array> values_;  // the current batch's text column, or null
  int64_t row_in_values_ = 0;
  int next_group_ = 0;                  // the row group next() opens when the open one ends
  int64_t pending_offset_ = 0;          // where in next_group_ a skip landed
  int64_t position_ = 0;                // documents read or skipped
};

}  // namespace

Result<std::unique_ptr<DocumentReader>> open_in_module(const std::string& path, const std::string& column) {
  arrow::MemoryPool* pool = arrow::default_memory_pool();
  auto file = arrow::io::ReadableFile::Open(path, pool);
  if (!file.ok()) return io_error("{}: cannot open: {}", path, one_line(file.status().message()));
  // Files written with page checksums (pyarrow's write_page_checksum=True) have each page
  // checked, so a flipped byte is an error rather than a changed document; the buffered
  // stream reads a column chunk 1 MiB at a time instead of whole.
  parquet::ReaderProperties properties(pool);
  properties.set_page_checksum_verification(true);
  properties.enable_buffered_stream();
  properties.set_buffer_size(1 << 20);
  std::unique_ptr<parquet::ParquetFileReader> parquet_file;
  try {
    parquet_file = parquet::ParquetFileReader::Open(*file, properties);
  } catch (const std::exception& e) {
    return data_loss("{}: not a readable Parquet file (corrupt or truncated?): {}", path, one_line(e.what()));
  }
  // One thread, no read-ahead: the reader decodes one batch at a time, on the caller's thread,
  // and the data pipeline decides what runs in the background.
  parquet::ArrowReaderProperties arrow_properties;
  arrow_properties.set_use_threads(false);
  arrow_properties.set_pre_buffer(false);
  arrow_properties.set_batch_size(kBatchRows);
  std::unique_ptr<parquet::arrow::FileReader> reader;
  std::shared_ptr<arrow::Schema> schema;
  try {
    auto made = parquet::arrow::FileReader::Make(pool, std::move(parquet_file), arrow_properties);
    if (!made.ok()) {
      return data_loss("{}: not a readable Parquet file: {}", path, one_line(made.status().message()));
    }
    reader = std::move(made).ValueUnsafe();
    auto status = reader->GetSchema(&schema);
    if (!status.ok()) return data_loss("{}: unreadable Parquet schema: {}", path, one_line(status.message()));
  } catch (const std::exception& e) {
    return data_loss("{}: not a readable Parquet file: {}", path, one_line(e.what()));
  }
  int field = schema->GetFieldIndex(column);
  if (field < 0) {
    std::string names;
    for (const auto& f : schema->fields()) names += (names.empty() ? "" : ", ") + f->name();
    return invalid_argument("{}: no column \"{}\" (its columns: {})", path, column, names.empty() ? "none" : names);
  }
  const auto& type = schema->field(field)->type();
  if (!is_text_type(type->id())) {
    return invalid_argument("{}: column \"{}\" is {}, not a string column (string, large_string or string_view)",
                            path, column, type->ToString());
  }
  int leaf = reader->parquet_reader()->metadata()->schema()->ColumnIndex(column);
  if (leaf < 0) return invalid_argument("{}: column \"{}\" is not a top-level Parquet column", path, column);
  return std::unique_ptr<DocumentReader>(std::make_unique<ParquetReader>(path, column, std::move(reader), leaf));
}

}  // namespace kiln::data

// The module's one entry point (parquet_reader.h kParquetEntry), looked up by dlsym.
extern "C" __attribute__((visibility("default"))) void kiln_parquet_open_v1(
    const std::string& path, const std::string& column, kiln::Result<std::unique_ptr<kiln::data::DocumentReader>>& out) {
  out = kiln::data::open_in_module(path, column);
}
