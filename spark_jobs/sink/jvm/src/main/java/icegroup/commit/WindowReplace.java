package icegroup.commit;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import org.apache.iceberg.BaseTable;
import org.apache.iceberg.DataFile;
import org.apache.iceberg.HasTableOperations;
import org.apache.iceberg.OverwriteFiles;
import org.apache.iceberg.Snapshot;
import org.apache.iceberg.Table;
import org.apache.iceberg.TableMetadata;
import org.apache.iceberg.exceptions.ValidationException;
import org.apache.iceberg.expressions.Expressions;
import org.apache.iceberg.shaded.com.fasterxml.jackson.databind.JsonNode;
import org.apache.iceberg.util.JsonUtil;

/**
 * A replay's sink commit: replace one window's output with the staged new output, in one commit.
 *
 * <p>The sink is partitioned by the window column, so deleting the window is a metadata operation on
 * whole files, whatever compaction did to them. The commit is an {@code overwrite}: it deletes every
 * file of the window and adds the staged files. Its checks run inside the catalog's compare-and-swap,
 * on the exact base of the commit:
 *
 * <ul>
 *   <li>the window's replay fence ({@code icegroup.replay.<group>.<window>}) is not above this
 *       replay's generation, and the group epoch is the one the replay began in: a superseded or
 *       zombie replay adds nothing;
 *   <li>no commit of the group since the replay read the window's coverage ({@code validateFrom})
 *       added output to the window: that output would be deleted without being replayed, so the
 *       replay fails with {@link WindowMoved} and plans again.
 * </ul>
 */
public final class WindowReplace {
  private WindowReplace() {}

  /** Output of the window was committed after the replay planned it; plan again. */
  public static final class WindowMoved extends ValidationException {
    WindowMoved(String message, Object... args) {
      super(message, args);
    }
  }

  /**
   * Replace the rows of {@code window} with the files staged under {@code stageToken}.
   *
   * @return {snapshot id, conflicting commits retried, records added, records deleted}
   */
  public static long[] replace(
      Table table,
      String stageToken,
      String group,
      String epochKey,
      int epoch,
      String fenceKey,
      int generation,
      String windowColumn,
      String window,
      long windowStartMs,
      Long validateFrom,
      Map<String, String> properties) {
    table.refresh();
    Snapshot staged = FencedCommit.findStaged(table, stageToken);
    if (staged == null) {
      throw new ValidationException(
          "staged output %s of the replay of window %s is gone; nothing was committed", stageToken, window);
    }
    List<DataFile> files = new ArrayList<>();
    for (DataFile file : staged.addedDataFiles(table.io())) {
      files.add(file.copy());
    }
    ReplayGuard guard =
        new ReplayGuard(group, epochKey, epoch, fenceKey, generation, window, windowStartMs, validateFrom, staged);
    FencedCommit.FencingOperations ops =
        new FencedCommit.FencingOperations(((HasTableOperations) table).operations(), guard);
    OverwriteFiles overwrite = new BaseTable(ops, table.name()).newOverwrite();
    overwrite.overwriteByRowFilter(Expressions.equal(windowColumn, window));
    files.forEach(overwrite::addFile);
    properties.forEach(overwrite::set);
    overwrite.set(FencedCommit.TOKEN_KEY, stageToken);
    overwrite.commit();
    TableMetadata current = ops.current();
    for (Snapshot s = current.currentSnapshot(); s != null; s = parent(current, s)) {
      if (stageToken.equals(s.summary().get(FencedCommit.TOKEN_KEY))) {
        long added = Long.parseLong(s.summary().getOrDefault("added-records", "0"));
        long deleted = Long.parseLong(s.summary().getOrDefault("deleted-records", "0"));
        return new long[] {s.snapshotId(), ops.conflicts(), added, deleted};
      }
    }
    throw new IllegalStateException(
        "the replay of window " + window + " succeeded but no snapshot on main carries its token " + stageToken);
  }

  /**
   * Swap whole data files for the files staged under {@code stageToken}, as a {@code replace}: the
   * same rows, rewritten (a sink migrated to the window column). A downstream group ignores it, as
   * it ignores compaction.
   *
   * @return {snapshot id, files replaced}
   */
  public static long[] rewrite(Table table, String stageToken, List<String> paths, Map<String, String> properties) {
    table.refresh();
    Snapshot staged = FencedCommit.findStaged(table, stageToken);
    if (staged == null) {
      throw new ValidationException("staged rewrite %s is gone; nothing was committed", stageToken);
    }
    java.util.Set<String> wanted = new java.util.HashSet<>(paths);
    java.util.Set<DataFile> replaced = new java.util.HashSet<>();
    try (org.apache.iceberg.io.CloseableIterable<org.apache.iceberg.FileScanTask> tasks =
        table.newScan().planFiles()) {
      for (org.apache.iceberg.FileScanTask task : tasks) {
        if (wanted.contains(task.file().location())) {
          replaced.add(task.file().copy());
        }
      }
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    if (replaced.size() != wanted.size()) {
      throw new ValidationException(
          "%s of the %s files to rewrite are no longer live; nothing was committed", wanted.size() - replaced.size(),
          wanted.size());
    }
    java.util.Set<DataFile> added = new java.util.HashSet<>();
    for (DataFile file : staged.addedDataFiles(table.io())) {
      added.add(file.copy());
    }
    FencedCommit.FencingOperations ops =
        new FencedCommit.FencingOperations(((HasTableOperations) table).operations(), new DropStaged(staged));
    org.apache.iceberg.RewriteFiles rewrite = new BaseTable(ops, table.name()).newRewrite();
    replaced.forEach(rewrite::deleteFile);
    added.forEach(rewrite::addFile);
    properties.forEach(rewrite::set);
    rewrite.set(FencedCommit.TOKEN_KEY, stageToken);
    rewrite.commit();
    return new long[] {ops.current().currentSnapshot().snapshotId(), replaced.size()};
  }

  /** No checks: a rewrite changes no rows. It only drops the staged snapshot in the same commit. */
  private static final class DropStaged implements FencedCommit.Check {
    private final Snapshot staged;

    DropStaged(Snapshot staged) {
      this.staged = staged;
    }

    @Override
    public void check(TableMetadata base) {}

    @Override
    public List<Snapshot> staged() {
      return Collections.singletonList(staged);
    }
  }

  private static Snapshot parent(TableMetadata metadata, Snapshot snapshot) {
    Long parentId = snapshot.parentId();
    return parentId == null ? null : metadata.snapshot(parentId);
  }

  /** The replay's checks, run against the exact base of each commit attempt. */
  private static final class ReplayGuard implements FencedCommit.Check {
    private final String group;
    private final String epochKey;
    private final int epoch;
    private final String fenceKey;
    private final int generation;
    private final String window;
    private final long windowStartMs;
    private final Long validateFrom;
    private final Snapshot staged;

    ReplayGuard(
        String group,
        String epochKey,
        int epoch,
        String fenceKey,
        int generation,
        String window,
        long windowStartMs,
        Long validateFrom,
        Snapshot staged) {
      this.group = group;
      this.epochKey = epochKey;
      this.epoch = epoch;
      this.fenceKey = fenceKey;
      this.generation = generation;
      this.window = window;
      this.windowStartMs = windowStartMs;
      this.validateFrom = validateFrom;
      this.staged = staged;
    }

    @Override
    public void check(TableMetadata base) {
      int fence = Integer.parseInt(base.property(fenceKey, "0"));
      if (generation < fence) {
        throw new FencedCommit.Fenced(
            "replay fenced: %s is at generation %s, this replay is generation %s (superseded)",
            fenceKey, fence, generation);
      }
      int current = Integer.parseInt(base.property(epochKey, "0"));
      if (epoch != current) {
        throw new FencedCommit.Fenced("epoch fenced: %s is %s, this replay is of epoch %s", epochKey, current, epoch);
      }
      if (base.snapshot(staged.snapshotId()) == null) {
        throw new ValidationException(
            "staged output of the replay of window %s was expired before it was published", window);
      }
      boolean reached = validateFrom == null;
      for (Snapshot s = base.currentSnapshot(); s != null; s = parent(base, s)) {
        if (validateFrom != null && s.snapshotId() == validateFrom) {
          reached = true;
          break;
        }
        Map<String, String> summary = s.summary();
        if (group.equals(summary.get(FencedCommit.GROUP_KEY)) && touchesWindow(summary)) {
          throw new WindowMoved(
              "sink snapshot %s committed output of window %s after the replay planned it", s.snapshotId(), window);
        }
      }
      if (!reached) {
        throw new WindowMoved("sink history back to snapshot %s (where the replay planned) is expired", validateFrom);
      }
    }

    private boolean touchesWindow(Map<String, String> summary) {
      if (window.equals(summary.get(FencedCommit.REPLAY_KEY))) {
        return true;
      }
      String ranges = summary.get(FencedCommit.SHARDS_KEY);
      if (ranges == null) {
        return false;
      }
      try {
        for (JsonNode range : JsonUtil.mapper().readTree(ranges)) {
          if (range.path("window").asLong(Long.MIN_VALUE) == windowStartMs) {
            return true;
          }
        }
      } catch (IOException e) {
        throw new UncheckedIOException("unreadable " + FencedCommit.SHARDS_KEY + " in a sink commit: " + ranges, e);
      }
      return false;
    }

    @Override
    public List<Snapshot> staged() {
      return Collections.singletonList(staged);
    }
  }
}
