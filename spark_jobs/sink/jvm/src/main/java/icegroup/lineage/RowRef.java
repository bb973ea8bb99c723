package icegroup.lineage;

import org.apache.spark.TaskContext;
import org.apache.spark.sql.api.java.UDF0;
import org.apache.spark.sql.api.java.UDF1;
import org.apache.spark.sql.expressions.UserDefinedFunction;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.types.DataTypes;

/**
 * Each output row's source row, {@code _ig_row}: the format-v3 {@code _row_id} of the row the task read last.
 *
 * <p>A transform selects the columns it wants, so a column icegroup adds to the rows it reads does not reach the
 * output. What does is the task: {@link #mark()} is a filter on the shard's read that keeps every row and notes
 * its {@code _row_id} in the task's thread, and {@link #current()}, evaluated on the transform's output, gives it
 * back. It names each output row's source row exactly where the plan hands rows on one by one, in order, within
 * one task (the same plans for which {@code input_file_name()} names the row's file, {@code spark_jobs/row_files.py}):
 * a row then leaves the plan before the next one is read.
 *
 * <p>The noted id carries the task's attempt id, so a thread that ran another task before never answers with a
 * row of that task: {@link #current()} gives null where this task marked nothing yet. Both functions are
 * non-deterministic, so the optimizer neither removes the filter, nor moves either call, nor merges them.
 */
public final class RowRef {
  private static final ThreadLocal<Noted> NOTED = ThreadLocal.withInitial(Noted::new);

  private RowRef() {}

  /** The last row id a task's thread noted, and that task's attempt id. */
  private static final class Noted {
    private long task = -1L;
    private Long rowId;
  }

  private static long taskId() {
    TaskContext context = TaskContext.get();
    return context == null ? -1L : context.taskAttemptId();
  }

  /** Notes the row's id for the task's thread and keeps the row: a filter that is always true. */
  public static final class Mark implements UDF1<Long, Boolean> {
    @Override
    public Boolean call(Long rowId) {
      Noted noted = NOTED.get();
      noted.task = taskId();
      noted.rowId = rowId;
      return Boolean.TRUE;
    }
  }

  /** The row id the task's thread noted last; null if this task noted none. */
  public static final class Current implements UDF0<Long> {
    @Override
    public Long call() {
      Noted noted = NOTED.get();
      return noted.task == taskId() ? noted.rowId : null;
    }
  }

  /**
   * The marking filter to register: made here, because Spark's {@code functions.udf} has untyped overloads that a
   * call through py4j may pick instead, which Spark then refuses.
   */
  public static UserDefinedFunction mark() {
    return functions.udf(new Mark(), DataTypes.BooleanType).asNondeterministic();
  }

  /** The function that gives an output row its source row's id, to register beside {@link #mark()}. */
  public static UserDefinedFunction current() {
    return functions.udf(new Current(), DataTypes.LongType).asNondeterministic();
  }
}
