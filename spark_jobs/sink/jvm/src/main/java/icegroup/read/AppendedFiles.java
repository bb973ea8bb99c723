package icegroup.read;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Deque;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.UUID;
import org.apache.iceberg.BaseFileScanTask;
import org.apache.iceberg.BaseTable;
import org.apache.iceberg.DataFile;
import org.apache.iceberg.DeleteFile;
import org.apache.iceberg.FileScanTask;
import org.apache.iceberg.HasTableOperations;
import org.apache.iceberg.ManifestFile;
import org.apache.iceberg.ManifestFiles;
import org.apache.iceberg.ManifestReader;
import org.apache.iceberg.PartitionSpec;
import org.apache.iceberg.PartitionSpecParser;
import org.apache.iceberg.SchemaParser;
import org.apache.iceberg.Snapshot;
import org.apache.iceberg.StaticTableOperations;
import org.apache.iceberg.Table;
import org.apache.iceberg.TableMetadata;
import org.apache.iceberg.expressions.Expressions;
import org.apache.iceberg.expressions.ResidualEvaluator;
import org.apache.iceberg.spark.ScanTaskSetManager;
import org.apache.iceberg.util.SnapshotUtil;

/**
 * A shard's read of the files it was cut from, planned from one manifest list instead of one per snapshot.
 *
 * <p>Iceberg's incremental read ({@code start-snapshot-id}, {@code end-snapshot-id}) opens the manifest list of
 * every snapshot in its range, and each snapshot keeps the list it read while the table is loaded. A list names
 * every manifest of the table at its snapshot, so a range of k snapshots on a table of n manifests holds about k x n
 * entries at once: on a source of 3,000 one-manifest snapshots, more than Spark's default 1g driver holds. The
 * newest snapshot's list names the manifests the older snapshots wrote too, as icegroup's own planning reads them
 * ({@code iceberg/shards.py}). So this reads that one list, opens only the manifests written inside the range, and
 * keeps exactly the files asked for that the range added (a manifest merged or rewritten inside the range lists them
 * too, beside older files that their sequence numbers keep out). A file not found there (deleted inside the range,
 * so its entry is gone from that list) is looked for in the manifests the range's snapshots wrote, newest first. A file in neither was not added in the range: the read
 * fails rather than leave its rows out.
 *
 * <p>The tasks carry no delete files, as Iceberg's incremental append read's do not. They are staged under a new id
 * in Iceberg's {@link ScanTaskSetManager}, which Spark's reader takes with the {@code scan-task-set-id} option. A
 * read's tasks are planned when its query runs, not when it is staged, so the last {@link #KEPT} sets stay staged
 * and older ones are dropped: a Borrower stages one set per read and runs it at once.
 */
public final class AppendedFiles {
  /** Staged task sets kept at once: far more than the reads a process's lease threads have built and not yet run. */
  public static final int KEPT = 256;

  /** The staged sets, oldest first, as {table uuid, set id}. */
  private static final Deque<String[]> STAGED = new ArrayDeque<>();

  /**
   * Per table uuid, one table to drop its sets by: Iceberg's manager finds a set by the table's uuid, which it reads
   * from the table's current metadata. It is held in memory (the metadata of the table's first staged read, never read
   * from storage again: an old metadata file may be gone), one per table rather than one per set.
   */
  private static final Map<String, Table> TABLES = new HashMap<>();

  private AppendedFiles() {}

  /**
   * Stage the scan tasks of {@code paths}, data files that snapshots after {@code fromExclusive} (null: from the
   * table's first) up to {@code toInclusive} added to {@code table}, one location a line; returns the task set's id.
   * The locations come as one string: a list through py4j costs a round trip per element.
   */
  public static String stage(Table table, Long fromExclusive, long toInclusive, String paths) {
    List<FileScanTask> tasks = tasks(table, fromExclusive, toInclusive, List.of(paths.split("\n")));
    String id = "icegroup-" + UUID.randomUUID();
    String uuid = ((HasTableOperations) table).operations().current().uuid();
    ScanTaskSetManager manager = ScanTaskSetManager.get();
    synchronized (STAGED) {
      manager.stageTasks(table, id, tasks);
      TABLES.computeIfAbsent(uuid, key -> inMemory(table));
      STAGED.addLast(new String[] {uuid, id});
      while (STAGED.size() > KEPT) {
        String[] oldest = STAGED.removeFirst();
        manager.removeTasks(TABLES.get(oldest[0]), oldest[1]);
      }
    }
    return id;
  }

  /** The table as it is loaded now, answering from memory: dropping a set never reads storage. */
  private static Table inMemory(Table table) {
    TableMetadata metadata = ((HasTableOperations) table).operations().current();
    return new BaseTable(new StaticTableOperations(metadata, table.io()), table.name());
  }

  /** The scan tasks of {@code paths}, one per file, in the order the manifests list them. */
  static List<FileScanTask> tasks(Table table, Long fromExclusive, long toInclusive, List<String> paths) {
    Snapshot newest = table.snapshot(toInclusive);
    if (newest == null) {
      throw new IllegalStateException(
          String.format("snapshot %d of %s is gone (expired since the shard was planned)", toInclusive, table.name()));
    }
    // As Iceberg's incremental read checks: the start may have expired, as long as the end's history names it.
    if (fromExclusive != null && !SnapshotUtil.isParentAncestorOf(table, toInclusive, fromExclusive)) {
      throw new IllegalStateException(
          String.format(
              "snapshot %d of %s is not a parent ancestor of snapshot %d", fromExclusive, table.name(), toInclusive));
    }
    Set<String> wanted = new HashSet<>(paths);
    List<Snapshot> range = new ArrayList<>();
    SnapshotUtil.ancestorsBetween(toInclusive, fromExclusive, table::snapshot).forEach(range::add);
    // From the first snapshot, any manifest of the newest list may hold a file: the table's first snapshots may have
    // expired, and their files are listed under their ids still.
    Set<Long> ids = null;
    if (fromExclusive != null) {
      ids = new HashSet<>();
      for (Snapshot snapshot : range) {
        ids.add(snapshot.snapshotId());
      }
    }
    Map<String, DataFile> found = new LinkedHashMap<>();
    Sequences added = new Sequences(table, fromExclusive, newest);
    collect(table, newest.dataManifests(table.io()), ids, added, wanted, found);
    for (Snapshot snapshot : range) {
      if (found.size() == wanted.size()) {
        break;
      }
      if (addsData(snapshot)) {
        collect(table, snapshot.dataManifests(table.io()), Set.of(snapshot.snapshotId()), added, wanted, found);
      }
    }
    if (found.size() != wanted.size()) {
      Set<String> missing = new HashSet<>(wanted);
      missing.removeAll(found.keySet());
      throw new IllegalStateException(
          String.format(
              "%d of the %d files asked for were not added to %s after snapshot %s up to %d, e.g. %s",
              missing.size(), wanted.size(), table.name(), fromExclusive, toInclusive, missing.iterator().next()));
    }
    String schema = SchemaParser.toJson(table.schema());
    Map<Integer, String> specs = new HashMap<>();
    ResidualEvaluator residual = ResidualEvaluator.unpartitioned(Expressions.alwaysTrue());
    List<FileScanTask> tasks = new ArrayList<>(found.size());
    for (DataFile file : found.values()) {
      String spec = specs.computeIfAbsent(file.specId(), id -> PartitionSpecParser.toJson(table.specs().get(id)));
      tasks.add(new BaseFileScanTask(file, new DeleteFile[0], schema, spec, residual));
    }
    return tasks;
  }

  /**
   * Whether a snapshot may have added data files: one whose summary says it added none is not opened, so that a
   * file deleted inside a long range does not open the manifest list of every snapshot in it.
   */
  private static boolean addsData(Snapshot snapshot) {
    String added = snapshot.summary() == null ? null : snapshot.summary().get("added-data-files");
    return added == null || !added.equals("0");
  }

  /**
   * The data sequence numbers of the range: a file added inside it has one above the start's and up to the end's.
   * A manifest merged or rewritten inside the range also lists files added before it, as existing entries; their
   * numbers keep them out. A format-v1 table has no sequence numbers: there every file passes.
   */
  static final class Sequences {
    private final long after;
    private final long upTo;
    private final boolean known;

    Sequences(Table table, Long fromExclusive, Snapshot newest) {
      Snapshot from = fromExclusive == null ? null : table.snapshot(fromExclusive);
      this.after = from == null ? Long.MIN_VALUE : from.sequenceNumber();
      this.upTo = newest.sequenceNumber();
      this.known = ((HasTableOperations) table).operations().current().formatVersion() > 1;
    }

    boolean within(DataFile file) {
      Long sequence = file.fileSequenceNumber();
      return !known || sequence == null || (sequence > after && sequence <= upTo);
    }
  }

  /** Add the live files of {@code wanted} that snapshots {@code ids} (null: any) wrote in the range to {@code found}. */
  private static void collect(
      Table table,
      List<ManifestFile> manifests,
      Set<Long> ids,
      Sequences added,
      Set<String> wanted,
      Map<String, DataFile> found) {
    Map<Integer, PartitionSpec> specs = table.specs();
    for (ManifestFile manifest : manifests) {
      if ((ids != null && !ids.contains(manifest.snapshotId())) || found.size() == wanted.size()) {
        continue;
      }
      try (ManifestReader<DataFile> reader = ManifestFiles.read(manifest, table.io(), specs)) {
        for (DataFile file : reader) {
          String location = file.location();
          if (wanted.contains(location) && !found.containsKey(location) && added.within(file)) {
            found.put(location, file.copyWithoutStats());
          }
        }
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
    }
  }
}
