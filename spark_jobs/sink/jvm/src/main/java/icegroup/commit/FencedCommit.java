package icegroup.commit;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import org.apache.iceberg.AppendFiles;
import org.apache.iceberg.BaseTable;
import org.apache.iceberg.DataFile;
import org.apache.iceberg.HasTableOperations;
import org.apache.iceberg.Snapshot;
import org.apache.iceberg.Table;
import org.apache.iceberg.TableMetadata;
import org.apache.iceberg.TableOperations;
import org.apache.iceberg.encryption.EncryptionManager;
import org.apache.iceberg.exceptions.BadRequestException;
import org.apache.iceberg.exceptions.CommitFailedException;
import org.apache.iceberg.exceptions.ValidationException;
import org.apache.iceberg.io.FileIO;
import org.apache.iceberg.io.LocationProvider;
import org.apache.iceberg.shaded.com.fasterxml.jackson.databind.JsonNode;
import org.apache.iceberg.util.JsonUtil;

/**
 * The Borrower's sink commit: publish the staged files of one or more shards of a lease as an append,
 * fenced by the lease.
 *
 * <p>Small shards of a lease are staged together and published in one commit, so that hundreds of
 * small source snapshots do not make hundreds of sink snapshots. Spark writes the shards' output
 * as a staged (write-audit-publish) snapshot, which readers of main never see. This class then
 * appends those files to main. The checks run inside the catalog's compare-and-swap, against
 * exactly the metadata the new snapshot is built on:
 *
 * <ul>
 *   <li>the lease's fence ({@code icegroup.fence.<group>.<lease>}, raised by the Leader before it
 *       re-grants) must not be above this attempt, and the group epoch must equal the lease's;
 *   <li>no snapshot since the grant may already carry any of the shards.
 * </ul>
 *
 * <p>If another writer commits in between, the swap fails, Iceberg refreshes and retries with
 * backoff, and the checks run again on the new metadata. So a zombie attempt or a second commit of a
 * shard cannot slip in between check and commit. The commit is an {@code append}, so another
 * group can consume this sink incrementally (chained groups), and it deletes nothing, so a
 * compacted sink does not stop it. The staged snapshot is dropped from the metadata in the same
 * commit.
 */
public final class FencedCommit {
  // Snapshot summary keys shared with Python (iceberg/protocol/sink_commit.py); a unit test pins them.
  public static final String STAGE_KEY = "icegroup.stage";
  public static final String SHARD_IDS_KEY = "icegroup.shard-ids";
  public static final String SHARDS_KEY = "icegroup.shards";
  public static final String GROUP_KEY = "icegroup.group";
  public static final String TOKEN_KEY = "icegroup.token";
  public static final String REPLAY_KEY = "icegroup.replay";

  private FencedCommit() {}

  /** What a commit must satisfy on its exact base, and the staged snapshot it drops from the metadata. */
  interface Check {
    void check(TableMetadata base);

    /** The staged snapshot this commit publishes (null for none). */
    Snapshot staged();
  }

  /** The metadata without the staged snapshot, so that the commit publishing it also drops it. */
  static TableMetadata withoutStaged(TableMetadata metadata, Snapshot staged) {
    if (staged == null || metadata.snapshot(staged.snapshotId()) == null) {
      return metadata;
    }
    return TableMetadata.buildFrom(metadata).removeSnapshots(Collections.singletonList(staged.snapshotId())).build();
  }

  /** A later attempt of the lease, or a new group epoch, was granted: this attempt may not commit. */
  public static final class Fenced extends ValidationException {
    Fenced(String message, Object... args) {
      super(message, args);
    }
  }

  /**
   * The staged output is not in the sink's metadata any more: nothing was committed, so it can be staged
   * again. A staged snapshot is referenced by no branch until it is published, so an expiry of the
   * sink's snapshots in between (another engine's {@code expire_snapshots}) can take it.
   */
  public static final class StagedGone extends ValidationException {
    StagedGone(String message, Object... args) {
      super(message, args);
    }
  }

  /** The shard is already in the sink (another attempt committed it, or this one already did). */
  public static final class AlreadyCommitted extends ValidationException {
    AlreadyCommitted(String message, Object... args) {
      super(message, args);
    }
  }

  /**
   * Append the files staged under {@code stageToken} to main.
   *
   * @return {snapshot id, conflicting commits retried, records added}
   *
   * @param shardIds the shards the staged files hold, comma-separated; each is checked
   * @param validateFrom sink snapshot seen at grant; the shard check walks back to it (null: to the start)
   */
  public static long[] commit(
      Table table,
      String stageToken,
      String group,
      String fenceKey,
      int attempt,
      String epochKey,
      int epoch,
      String shardIds,
      Long validateFrom,
      Map<String, String> properties) {
    table.refresh();
    Snapshot staged = findStaged(table, stageToken);
    if (staged == null) {
      throw new StagedGone(
          "staged output %s of shards %s is gone (expired before it was published?); nothing was committed",
          stageToken, shardIds);
    }
    List<DataFile> files = new ArrayList<>();
    for (DataFile file : staged.addedDataFiles(table.io())) {
      files.add(file.copy());
    }
    Guard guard =
        new Guard(group, fenceKey, attempt, epochKey, epoch, shardIds.split(","), validateFrom, staged);
    FencingOperations ops =
        new FencingOperations(((HasTableOperations) table).operations(), guard);
    AppendFiles append = new BaseTable(ops, table.name()).newAppend();
    files.forEach(append::appendFile);
    properties.forEach(append::set);
    append.set(TOKEN_KEY, stageToken);
    append.commit();
    Snapshot head = ops.current().currentSnapshot();
    for (Snapshot s = head; s != null; s = parent(ops.current(), s)) {
      if (stageToken.equals(s.summary().get(TOKEN_KEY))) {
        String added = s.summary().getOrDefault("added-records", "0");
        return new long[] {s.snapshotId(), ops.conflicts(), Long.parseLong(added)};
      }
    }
    throw new IllegalStateException(
        "the commit of shards " + shardIds + " succeeded but no snapshot on main carries its token " + stageToken);
  }

  /** Drop a staged snapshot and its files after a failed publish, so a fenced attempt leaves nothing. */
  public static boolean discardStaged(Table table, String stageToken) {
    table.refresh();
    Snapshot staged = findStaged(table, stageToken);
    if (staged == null) {
      return false;
    }
    table.expireSnapshots().expireSnapshotId(staged.snapshotId()).cleanExpiredFiles(true).commit();
    return true;
  }

  static Snapshot findStaged(Table table, String stageToken) {
    List<Snapshot> snapshots = new ArrayList<>();
    table.snapshots().forEach(snapshots::add);
    Collections.reverse(snapshots);
    for (Snapshot s : snapshots) {
      if (stageToken.equals(s.summary().get(STAGE_KEY))) {
        if (s.summary().get("wap.id") == null || onMain(table.currentSnapshot(), table, s)) {
          throw new IllegalStateException(
              "snapshot " + s.snapshotId() + " was committed to main, not staged: the sink needs write.wap.enabled=true");
        }
        return s;
      }
    }
    return null;
  }

  /**
   * Whether {@code staged} is on main. The walk back from the head stops at the first snapshot older
   * (by sequence number) than the staged one, so a publish reads the commits made since its stage,
   * not the sink's whole history.
   */
  private static boolean onMain(Snapshot head, Table table, Snapshot staged) {
    long sequence = staged.sequenceNumber();
    for (Snapshot s = head; s != null; s = s.parentId() == null ? null : table.snapshot(s.parentId())) {
      if (s.snapshotId() == staged.snapshotId()) {
        return true;
      }
      if (sequence > 0 && s.sequenceNumber() < sequence) {
        return false;
      }
    }
    return false;
  }


  /**
   * Whether a commit's summary carries exactly {@code shardId}.
   *
   * <p>Commits list their shard ids, comma-separated, under {@link #SHARD_IDS_KEY}. Commits written
   * before that key existed carry them only in the JSON ranges under {@link #SHARDS_KEY}; those are
   * parsed, and each {@code id} is compared exactly, so no commit of a shard goes unseen.
   */
  public static boolean carriesShard(Map<String, String> summary, String shardId) {
    String ids = summary.get(SHARD_IDS_KEY);
    if (ids != null) {
      for (String id : ids.split(",")) {
        if (id.equals(shardId)) {
          return true;
        }
      }
      return false;
    }
    String ranges = summary.get(SHARDS_KEY);
    if (ranges == null) {
      return false;
    }
    try {
      for (JsonNode range : JsonUtil.mapper().readTree(ranges)) {
        if (shardId.equals(range.path("id").asText(null))) {
          return true;
        }
      }
    } catch (IOException e) {
      throw new UncheckedIOException("unreadable " + SHARDS_KEY + " in a sink commit: " + ranges, e);
    }
    return false;
  }

  private static Snapshot parent(TableMetadata metadata, Snapshot snapshot) {
    Long parentId = snapshot.parentId();
    return parentId == null ? null : metadata.snapshot(parentId);
  }

  /** The checks, run against the exact base of each commit attempt. */
  private static final class Guard implements Check {
    private final String group;
    private final String fenceKey;
    private final int attempt;
    private final String epochKey;
    private final int epoch;
    private final String[] shardIds;
    private final Long validateFrom;
    private final Snapshot staged;

    Guard(
        String group,
        String fenceKey,
        int attempt,
        String epochKey,
        int epoch,
        String[] shardIds,
        Long validateFrom,
        Snapshot staged) {
      this.group = group;
      this.fenceKey = fenceKey;
      this.attempt = attempt;
      this.epochKey = epochKey;
      this.epoch = epoch;
      this.shardIds = shardIds;
      this.validateFrom = validateFrom;
      this.staged = staged;
    }

    @Override
    public void check(TableMetadata base) {
      int granted = Integer.parseInt(base.property(fenceKey, "0"));
      if (attempt < granted) {
        throw new Fenced(
            "lease fenced: %s is at attempt %s, this Borrower holds attempt %s", fenceKey, granted, attempt);
      }
      int current = Integer.parseInt(base.property(epochKey, "0"));
      if (epoch != current) {
        throw new Fenced("epoch fenced: %s is %s, this lease is of epoch %s", epochKey, current, epoch);
      }
      if (staged != null && base.snapshot(staged.snapshotId()) == null) {
        throw new StagedGone(
            "staged output of shards %s (snapshot %s) was expired before it was published; nothing was committed",
            String.join(",", shardIds), staged.snapshotId());
      }
      boolean reached = validateFrom == null;
      Snapshot last = null;
      for (Snapshot s = base.currentSnapshot(); s != null; s = parent(base, s)) {
        if (validateFrom != null && s.snapshotId() == validateFrom) {
          reached = true;
          break;
        }
        last = s;
        Map<String, String> summary = s.summary();
        if (group.equals(summary.get(GROUP_KEY))) {
          for (String shardId : shardIds) {
            if (carriesShard(summary, shardId)) {
              throw new AlreadyCommitted("shard %s is already committed in snapshot %s", shardId, s.snapshotId());
            }
          }
        }
      }
      boolean parentIsBase = last != null && validateFrom != null && validateFrom.equals(last.parentId());
      if (!reached && !parentIsBase) {
        throw new ValidationException(
            "sink history back to snapshot %s (seen at grant) is expired, so it cannot be shown that shards %s "
                + "are not committed yet; the Leader re-grants from the current head",
            validateFrom, String.join(",", shardIds));
      }
    }

    @Override
    public Snapshot staged() {
      return staged;
    }
  }

  /** Delegates to the catalog's operations; checks the guard on the base of every swap. */
  static final class FencingOperations implements TableOperations {
    private final TableOperations delegate;
    private final Check guard;
    private long conflicts = 0;

    FencingOperations(TableOperations delegate, Check guard) {
      this.delegate = delegate;
      this.guard = guard;
    }

    long conflicts() {
      return conflicts;
    }

    @Override
    public TableMetadata current() {
      return delegate.current();
    }

    @Override
    public TableMetadata refresh() {
      return delegate.refresh();
    }

    @Override
    public void commit(TableMetadata base, TableMetadata metadata) {
      guard.check(base);
      try {
        delegate.commit(base, withoutStaged(metadata, guard.staged()));
      } catch (CommitFailedException e) {
        conflicts += 1;
        throw e;
      } catch (BadRequestException e) {
        if (!lostSequenceRace(e)) {
          throw e;
        }
        conflicts += 1;
        throw new CommitFailedException(e, "lost a race on the sink's sequence number: %s", e.getMessage());
      }
    }

    /**
     * Whether the server refused the commit because another writer took its sequence number first.
     * Iceberg's reference handlers (its REST fixture, up to 1.10) answer that with 400; from 1.11, and
     * on most servers, it is a 409. Either way nothing was applied, so it is retried on fresh metadata
     * like any lost race.
     */
    static boolean lostSequenceRace(BadRequestException e) {
      String message = e.getMessage();
      return message != null && message.contains("Cannot add snapshot with sequence number");
    }

    @Override
    public FileIO io() {
      return delegate.io();
    }

    @Override
    public EncryptionManager encryption() {
      return delegate.encryption();
    }

    @Override
    public String metadataFileLocation(String fileName) {
      return delegate.metadataFileLocation(fileName);
    }

    @Override
    public LocationProvider locationProvider() {
      return delegate.locationProvider();
    }

    @Override
    public TableOperations temp(TableMetadata uncommittedMetadata) {
      return delegate.temp(uncommittedMetadata);
    }

    @Override
    public long newSnapshotId() {
      return delegate.newSnapshotId();
    }

    @Override
    public boolean requireStrictCleanup() {
      return delegate.requireStrictCleanup();
    }
  }
}
