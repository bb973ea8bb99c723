package icegroup.lineage;

import java.util.HashMap;
import java.util.Map;
import org.apache.spark.rdd.InputFileBlockHolder;
import org.apache.spark.sql.api.java.UDF0;
import org.apache.spark.sql.expressions.UserDefinedFunction;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * Each output row's value chosen by the source file the task is reading: a batch's shard numbers, one per file.
 *
 * <p>The values are held by file reference ({@link FileRef}'s XXH64 of each spelling of a location), in a map that
 * travels with the function to the tasks, so a lease's values are data, not code: Spark writes a primitive literal
 * into the class it generates for a job, and a lease whose values were literals compiled a class of its own. The
 * last file seen and its value are kept, as {@link FileRef} keeps its hash, so a row of the same file costs a
 * reference comparison: one call a row, where the SQL form ({@code row_files.by_file}) called the reference twice
 * and looked through an array of maps.
 *
 * <p>A row of a file the map does not hold (or read from no file) fails its task, naming the file: it would
 * otherwise be written without the lineage it needs. Non-deterministic, like {@code input_file_name()}, so the
 * optimizer neither moves the call away from the scan nor merges it.
 */
public final class FileValues implements UDF0<Long> {
  private static final long serialVersionUID = 1L;

  private final HashMap<Long, Long> values;
  private transient FileRef.Seen seen;

  FileValues(Map<Long, Long> values) {
    this.values = new HashMap<>(values);
  }

  /**
   * The function of each row's value, from {@code pairs}: a reference and its value per line, in decimal, separated
   * by a space (one string through py4j, not a call per file). The caller applies it to no columns.
   */
  public static UserDefinedFunction function(String pairs) {
    Map<Long, Long> values = new HashMap<>();
    for (String line : pairs.split("\n")) {
      if (line.isEmpty()) {
        continue;
      }
      int space = line.indexOf(' ');
      values.put(Long.parseLong(line.substring(0, space)), Long.parseLong(line.substring(space + 1)));
    }
    return functions.udf(new FileValues(values), DataTypes.LongType).asNondeterministic();
  }

  @Override
  public Long call() {
    UTF8String path = InputFileBlockHolder.getInputFilePath();
    FileRef.Seen last = seen;
    if (last != null && last.path == path) {
      return last.value;
    }
    Long value = path.numBytes() == 0 ? null : values.get(FileRef.hash(path));
    if (value == null) {
      throw new IllegalStateException("a row of a source file the batch does not hold: " + path);
    }
    seen = new FileRef.Seen(path, value);
    return value;
  }
}
