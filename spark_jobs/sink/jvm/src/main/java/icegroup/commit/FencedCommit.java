package icegroup.commit;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.iceberg.AppendFiles;
import org.apache.iceberg.DataFile;
import org.apache.iceberg.HasTableOperations;
import org.apache.iceberg.Snapshot;
import org.apache.iceberg.Table;
import org.apache.iceberg.TableMetadata;
import org.apache.iceberg.TableOperations;
import org.apache.iceberg.Transaction;
import org.apache.iceberg.Transactions;
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
 * commit. A file staged through the sink's unpartitioned staging spec is appended in its window's
 * partition ({@link StagingSpec}).
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

    /** The staged snapshots this commit publishes, each dropped from the metadata it commits. */
    List<Snapshot> staged();
  }

  /** The metadata without the staged snapshots, so that the commit publishing them also drops them. */
  static TableMetadata withoutStaged(TableMetadata metadata, List<Snapshot> staged) {
    List<Long> ids = new ArrayList<>();
    for (Snapshot snapshot : staged) {
      if (snapshot != null && metadata.snapshot(snapshot.snapshotId()) != null) {
        ids.add(snapshot.snapshotId());
      }
    }
    return ids.isEmpty() ? metadata : TableMetadata.buildFrom(metadata).removeSnapshots(ids).build();
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
   * One lease's staged shards to publish: its own snapshot in the commit, fenced by its own attempt.
   *
   * <p>{@code shardIds} are the shards the staged files hold, comma-separated, each checked;
   * {@code validateFrom} is the sink snapshot seen at the lease's grant, where the shard check stops
   * walking back (null: the start).
   */
  public static final class Request {
    final String stageToken;
    final String fenceKey;
    final int attempt;
    final int epoch;
    final String shardIds;
    final Long validateFrom;
    final Map<String, String> properties;

    public Request(
        String stageToken,
        String fenceKey,
        int attempt,
        int epoch,
        String shardIds,
        Long validateFrom,
        Map<String, String> properties) {
      this.stageToken = stageToken;
      this.fenceKey = fenceKey;
      this.attempt = attempt;
      this.epoch = epoch;
      this.shardIds = shardIds;
      this.validateFrom = validateFrom;
      this.properties = properties;
    }
  }

  /** How one request of {@link #commitAll} ended: its snapshot on main, or the refusal that kept it out. */
  public static final class Outcome {
    private long snapshotId = -1;
    private long added = 0;
    private long conflicts = 0;
    private RuntimeException refused = null;

    public long snapshotId() {
      return snapshotId;
    }

    public long added() {
      return added;
    }

    /**
     * Conflicting commits the swaps of this call lost, on the first request published (or on the first
     * request, when none was): summed over outcomes, each lost swap counts once.
     */
    public long conflicts() {
      return conflicts;
    }

    /** Null when published. */
    public RuntimeException refused() {
      return refused;
    }
  }

  /** One request of a commit failed its check: that request is refused, and the commit tries again without it. */
  static final class Refused extends ValidationException {
    final int index;
    final RuntimeException reason;

    Refused(int index, RuntimeException reason) {
      super("%s", reason.getMessage());
      this.index = index;
      this.reason = reason;
    }
  }

  /**
   * Publish the staged files of several leases in one swap of the sink's metadata: one catalog commit, a
   * snapshot per lease inside it, each with its own summary, each checked against its own fence.
   *
   * <p>A request whose check fails (its lease fenced, a shard already in the sink, its staged output
   * expired) is refused and the others are committed without it, in a new swap on fresh metadata:
   * one lease's zombie never fails another's commit. A failure of the swap itself (the catalog
   * unreachable, a race lost at every retry) is thrown, and no request was committed.
   *
   * @return one outcome per request, in order
   */
  public static List<Outcome> commitAll(Table table, String group, String epochKey, List<Request> requests) {
    table.refresh();
    int count = requests.size();
    List<Outcome> outcomes = new ArrayList<>();
    Snapshot[] staged = new Snapshot[count];
    List<List<DataFile>> files = new ArrayList<>();
    List<Integer> pending = new ArrayList<>();
    for (int i = 0; i < count; i++) {
      outcomes.add(new Outcome());
      files.add(List.of());
      Request request = requests.get(i);
      staged[i] = findStaged(table, request.stageToken);
      if (staged[i] == null) {
        outcomes.get(i).refused = new StagedGone(
            "staged output %s of shards %s is gone (expired before it was published?); nothing was committed",
            request.stageToken, request.shardIds);
        continue;
      }
      try {
        files.set(i, onMain(table, staged[i]));
        pending.add(i);
      } catch (IllegalStateException unplaceable) {  // refused alone: the other requests still commit
        outcomes.get(i).refused = unplaceable;
      }
    }
    long conflicts = 0;
    while (!pending.isEmpty()) {
      Batch guard = new Batch(group, epochKey, requests, pending, staged);
      FencingOperations ops = new FencingOperations(((HasTableOperations) table).operations(), guard);
      Transaction transaction = Transactions.newTransaction(table.name(), ops);
      for (int i : pending) {
        AppendFiles append = transaction.newAppend();
        files.get(i).forEach(append::appendFile);
        requests.get(i).properties.forEach(append::set);
        append.set(TOKEN_KEY, requests.get(i).stageToken);
        append.commit();
      }
      try {
        transaction.commitTransaction();
      } catch (Refused refused) {
        conflicts += ops.conflicts();
        outcomes.get(refused.index).refused = refused.reason;
        pending.remove(Integer.valueOf(refused.index));
        table.refresh();
        continue;
      }
      conflicts += ops.conflicts();
      published(ops.current(), requests, pending, outcomes);
      outcomes.get(pending.get(0)).conflicts = conflicts;
      conflicts = 0;
      break;
    }
    if (conflicts > 0) {
      outcomes.get(0).conflicts = conflicts;
    }
    return outcomes;
  }

  /** The staged snapshot's files as main's append takes them: placed in the current spec where staged without one. */
  private static List<DataFile> onMain(Table table, Snapshot staged) {
    List<DataFile> files = new ArrayList<>();
    for (DataFile file : staged.addedDataFiles(table.io())) {
      files.add(StagingSpec.onMain(file, table.spec(), table.specs(), table.sortOrders()));
    }
    return files;
  }

  /** Fill in the snapshot each pending request made, found on main by its token. */
  private static void published(
      TableMetadata metadata, List<Request> requests, List<Integer> pending, List<Outcome> outcomes) {
    Map<String, Integer> byToken = new HashMap<>();
    pending.forEach(i -> byToken.put(requests.get(i).stageToken, i));
    for (Snapshot s = metadata.currentSnapshot(); s != null && !byToken.isEmpty(); s = parent(metadata, s)) {
      Integer index = byToken.remove(s.summary().get(TOKEN_KEY));
      if (index != null) {
        Outcome outcome = outcomes.get(index);
        outcome.snapshotId = s.snapshotId();
        outcome.added = Long.parseLong(s.summary().getOrDefault("added-records", "0"));
      }
    }
    if (!byToken.isEmpty()) {
      throw new IllegalStateException(
          "the commit succeeded but no snapshot on main carries the tokens " + byToken.keySet());
    }
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

  /**
   * The checks of every request in a commit, run against the exact base of each attempt at the swap.
   * A request that fails its own check is thrown as {@link Refused}, naming it; two requests of one
   * commit carrying the same shard are a duplicate like any other.
   */
  private static final class Batch implements Check {
    private final String group;
    private final String epochKey;
    private final List<Request> requests;
    private final List<Integer> pending;
    private final Snapshot[] staged;

    Batch(String group, String epochKey, List<Request> requests, List<Integer> pending, Snapshot[] staged) {
      this.group = group;
      this.epochKey = epochKey;
      this.requests = requests;
      this.pending = pending;
      this.staged = staged;
    }

    @Override
    public void check(TableMetadata base) {
      Map<String, Integer> claimed = new HashMap<>();
      for (int i : pending) {
        Request request = requests.get(i);
        String[] shardIds = request.shardIds.split(",");
        try {
          checkOne(base, request, shardIds, staged[i]);
          for (String shardId : shardIds) {
            Integer other = claimed.putIfAbsent(shardId, i);
            if (other != null) {
              throw new AlreadyCommitted(
                  "shard %s is in two requests of one commit (stages %s and %s)",
                  shardId, requests.get(other).stageToken, request.stageToken);
            }
          }
        } catch (ValidationException e) {
          throw new Refused(i, e);
        }
      }
    }

    private void checkOne(TableMetadata base, Request request, String[] shardIds, Snapshot stagedSnapshot) {
      int granted = Integer.parseInt(base.property(request.fenceKey, "0"));
      if (request.attempt < granted) {
        throw new Fenced(
            "lease fenced: %s is at attempt %s, this Borrower holds attempt %s",
            request.fenceKey, granted, request.attempt);
      }
      int current = Integer.parseInt(base.property(epochKey, "0"));
      if (request.epoch != current) {
        throw new Fenced("epoch fenced: %s is %s, this lease is of epoch %s", epochKey, current, request.epoch);
      }
      if (base.snapshot(stagedSnapshot.snapshotId()) == null) {
        throw new StagedGone(
            "staged output of shards %s (snapshot %s) was expired before it was published; nothing was committed",
            request.shardIds, stagedSnapshot.snapshotId());
      }
      Long validateFrom = request.validateFrom;
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
            validateFrom, request.shardIds);
      }
    }

    @Override
    public List<Snapshot> staged() {
      List<Snapshot> all = new ArrayList<>();
      pending.forEach(i -> all.add(staged[i]));
      return all;
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
