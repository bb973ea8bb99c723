package icegroup.commit;

import java.nio.ByteBuffer;
import java.util.List;
import java.util.Map;
import org.apache.iceberg.DataFile;
import org.apache.iceberg.DataFiles;
import org.apache.iceberg.HasTableOperations;
import org.apache.iceberg.Metrics;
import org.apache.iceberg.PartitionData;
import org.apache.iceberg.PartitionField;
import org.apache.iceberg.PartitionSpec;
import org.apache.iceberg.SortOrder;
import org.apache.iceberg.Table;
import org.apache.iceberg.TableProperties;
import org.apache.iceberg.Transaction;
import org.apache.iceberg.exceptions.CommitFailedException;
import org.apache.iceberg.exceptions.ValidationException;
import org.apache.iceberg.expressions.Expressions;
import org.apache.iceberg.transforms.Transforms;
import org.apache.iceberg.types.Conversions;
import org.apache.iceberg.types.Type;

/**
 * Staging a shard's output without routing rows to partitions, and placing its files in the window
 * partition as they are published.
 *
 * <p>A sink is partitioned by the replay window, so Spark's partitioned writer routes every row to
 * its partition: it computes the row's partition key and looks up its open file, per row. That is
 * 0.12x to 0.16x of a plain write on W1's rows, though every row of a one-window batch has the same
 * window. So such a batch is written through an unpartitioned spec of the sink (Spark's {@code
 * output-spec-id}), and the fenced commit gives each file its partition: the value of each identity
 * field of the sink's spec, taken from the file's own column bounds, which must prove one non-null
 * value. A staged file that does not (its rows span two windows) is never appended: its lease's
 * request is refused, and the other requests of the swap commit. What main holds is then exactly
 * what the partitioned writer would have made.
 */
public final class StagingSpec {
  private StagingSpec() {}

  /**
   * The id of an unpartitioned spec of {@code table} to stage through, added if the table has none;
   * -1 unless the table's current spec is exactly one identity field on {@code column} (a file's
   * bounds can prove one value of that column for every row the caller writes; another field, a
   * user's own partitioning, could not be proven so), the table is of format version 2 or later,
   * and it writes Parquet or ORC (Avro files carry no column bounds).
   *
   * <p>The spec is added in one metadata swap that also keeps the current spec the default: removing
   * the field makes the unpartitioned spec, and adding it back finds the current spec again
   * (Iceberg reuses a spec that is compatible with an existing one). Of writers that race to add it,
   * the loser's swap fails; it then finds the winner's spec. An expiry that cleans unused metadata
   * may remove the spec again (only staged snapshots use it): callers ask before each write.
   */
  public static int ensure(Table table, String column) {
    if (!stageable(table, column)) {
      return -1;
    }
    Integer found = unpartitioned(table);
    if (found != null) {
      return found;
    }
    PartitionSpec current = table.spec();
    String field = current.fields().get(0).name();
    Transaction transaction = table.newTransaction();
    transaction.updateSpec().removeField(field).commit();
    transaction.updateSpec().addField(field, Expressions.ref(column)).commit();
    if (transaction.table().spec().specId() != current.specId() || unpartitioned(transaction.table()) == null) {
      return -1;  // this Iceberg would not keep the window spec the default: the sink is left as it is
    }
    try {
      transaction.commitTransaction();
    } catch (CommitFailedException | ValidationException lost) {  // another writer changed the specs first
      table.refresh();
    }
    table.refresh();
    if (!stageable(table, column)) {
      return -1;
    }
    found = unpartitioned(table);
    return found == null ? -1 : found;
  }

  private static boolean stageable(Table table, String column) {
    PartitionSpec spec = table.spec();
    if (spec.fields().size() != 1 || !(table instanceof HasTableOperations)) {
      return false;
    }
    PartitionField field = spec.fields().get(0);
    String format = table.properties().getOrDefault(TableProperties.DEFAULT_FILE_FORMAT, "parquet");
    return field.transform().isIdentity()
        && column.equals(spec.schema().findColumnName(field.sourceId()))
        && ((HasTableOperations) table).operations().current().formatVersion() >= 2  // v1 keeps removed fields as void
        && ("parquet".equalsIgnoreCase(format) || "orc".equalsIgnoreCase(format));
  }

  /** A spec with no field at all: a void field (a removed one, in format v1) is a field, and its files have a tuple. */
  private static Integer unpartitioned(Table table) {
    for (PartitionSpec spec : table.specs().values()) {
      if (spec.fields().isEmpty()) {
        return spec.specId();
      }
    }
    return null;
  }

  /**
   * {@code staged} as main's append takes it: as it is if written with {@code target}'s spec (or
   * another one with fields, as before), else, written with a spec of no fields, placed in {@code
   * target} by its bounds.
   *
   * @throws IllegalStateException if a file of an unpartitioned spec does not prove one value of
   *     every field of {@code target}: such a file must not reach main
   */
  static DataFile onMain(
      DataFile staged, PartitionSpec target, Map<Integer, PartitionSpec> specs, Map<Integer, SortOrder> sortOrders) {
    PartitionSpec own = specs.get(staged.specId());
    if (staged.specId() == target.specId() || own == null || !own.fields().isEmpty()) {
      return staged.copy();
    }
    PartitionData partition = new PartitionData(target.partitionType());
    List<PartitionField> fields = target.fields();
    for (int i = 0; i < fields.size(); i++) {
      partition.set(i, provenValue(staged, target, fields.get(i)));
    }
    DataFiles.Builder placed = DataFiles.builder(target)
        .withPath(staged.location())
        .withFormat(staged.format())
        .withFileSizeInBytes(staged.fileSizeInBytes())
        .withMetrics(new Metrics(staged.recordCount(), staged.columnSizes(), staged.valueCounts(),
            staged.nullValueCounts(), staged.nanValueCounts(), staged.lowerBounds(), staged.upperBounds()))
        .withPartition(partition);
    if (staged.splitOffsets() != null) {
      placed.withSplitOffsets(staged.splitOffsets());
    }
    if (staged.keyMetadata() != null) {
      placed.withEncryptionKeyMetadata(staged.keyMetadata());
    }
    SortOrder order = staged.sortOrderId() == null ? null : sortOrders.get(staged.sortOrderId());
    if (order != null) {
      placed.withSortOrder(order);
    }
    return placed.build();
  }

  private static Object provenValue(DataFile staged, PartitionSpec target, PartitionField field) {
    int source = field.sourceId();
    Type type = target.schema().findType(source);
    ByteBuffer lower = staged.lowerBounds() == null ? null : staged.lowerBounds().get(source);
    ByteBuffer upper = staged.upperBounds() == null ? null : staged.upperBounds().get(source);
    Long nulls = staged.nullValueCounts() == null ? null : staged.nullValueCounts().get(source);
    if (!field.transform().isIdentity() || lower == null || !lower.equals(upper) || nulls == null || nulls != 0) {
      throw new IllegalStateException(String.format(
          "staged file %s (spec %d) cannot be placed in partition field %s of spec %d: its column %s does not hold "
              + "one non-null value (bounds %s to %s, %s nulls); it is not published",
          staged.location(), staged.specId(), field.name(), target.specId(), target.schema().findColumnName(source),
          shown(type, lower), shown(type, upper), nulls));
    }
    Object value = Conversions.fromByteBuffer(type, lower);
    return value instanceof CharSequence ? value.toString() : value;  // a string bound decodes as a CharBuffer
  }

  /** A bound as a person reads it: a date as a date, not a day number. */
  private static String shown(Type type, ByteBuffer bound) {
    return bound == null ? "none" : Transforms.identity().toHumanString(type, Conversions.fromByteBuffer(type, bound));
  }
}
