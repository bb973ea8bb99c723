package icegroup.rest;

import org.apache.iceberg.exceptions.AlreadyExistsException;
import org.apache.iceberg.exceptions.BadRequestException;
import org.apache.iceberg.exceptions.CommitFailedException;
import org.apache.iceberg.exceptions.ForbiddenException;
import org.apache.iceberg.exceptions.NamespaceNotEmptyException;
import org.apache.iceberg.exceptions.NoSuchIcebergTableException;
import org.apache.iceberg.exceptions.NoSuchNamespaceException;
import org.apache.iceberg.exceptions.NoSuchTableException;
import org.apache.iceberg.exceptions.NoSuchViewException;
import org.apache.iceberg.exceptions.NotAuthorizedException;
import org.apache.iceberg.exceptions.ValidationException;
import org.apache.iceberg.rest.responses.ErrorResponse;
import org.apache.iceberg.shaded.com.fasterxml.jackson.core.JsonProcessingException;

/**
 * What a failed request tells the client: an HTTP status plus the spec's {@code ErrorResponse}.
 *
 * <p>The status is the whole contract for a client's next step, so the mapping is deliberate: 409
 * means "the commit did not happen, refresh and retry" (pyiceberg raises {@code
 * CommitFailedException}, Java's producers retry), 400 means "this request can never succeed" (no
 * retry), and 500 means "commit state unknown" (the client must not clean up its files). The message
 * of a failed requirement ("Requirement failed: branch main has changed: expected id X != Y") is
 * passed through untouched, because clients surface it verbatim.
 *
 * <p>One case needs more than the exception's class: two commits that add a snapshot to the same
 * table race inside {@code CatalogHandlers.updateTable}. The loser's backend compare-and-swap fails,
 * the handler refreshes, re-checks the requirements and re-applies the updates on the new base, and
 * {@code TableMetadata.Builder.addSnapshot} then rejects the snapshot with a {@code
 * ValidationException} ("Cannot add snapshot with sequence number N older than last sequence number
 * M"). The same happens without a backend retry when a commit carries no requirement on the ref (a
 * staged WAP snapshot, say) and another commit landed first. In Iceberg 1.9.2 this surfaces from
 * {@code updateTable} as that {@code ValidationException}, unwrapped (its retry loop retries only
 * {@code CommitFailedException}). It is a lost race, not a bad request: it is sent as 409 {@code
 * CommitFailedException} with the message kept, so clients retry it like any other lost race.
 */
final class Errors {
  static final String STALE_SEQUENCE_NUMBER = "Cannot add snapshot with sequence number";

  private Errors() {}

  /** The HTTP status for an exception thrown while serving a request. */
  static int status(Throwable error) {
    Throwable e = unwrap(error);
    if (isLostSnapshotRace(e)) {
      return 409;
    }
    if (e instanceof NotAuthorizedException) {
      return 401;
    }
    if (e instanceof ForbiddenException) {
      return 403;
    }
    if (e instanceof NoSuchNamespaceException
        || e instanceof NoSuchTableException
        || e instanceof NoSuchViewException
        || e instanceof NoSuchIcebergTableException) {
      // Not NotFoundException: that is a missing file (a metadata file deleted under a table), and
      // a 404 would tell a client the table does not exist. It stays a 500, as in Iceberg's adapter.
      return 404;
    }
    if (e instanceof AlreadyExistsException
        || e instanceof CommitFailedException
        || e instanceof NamespaceNotEmptyException) {
      return 409;
    }
    if (e instanceof IllegalArgumentException
        || e instanceof ValidationException
        || e instanceof BadRequestException
        || e instanceof UnsupportedOperationException
        || e instanceof JsonProcessingException) {
      // UnsupportedOperationException: an unknown requirement or update type (the spec says 400).
      // JsonProcessingException: a malformed body.
      return 400;
    }
    return 500;
  }

  /** The {@code ErrorResponse} body for an exception: its message, its simple class name, the status. */
  static ErrorResponse response(Throwable error) {
    Throwable e = unwrap(error);
    int code = status(e);
    String type;
    String message = e.getMessage() != null ? e.getMessage() : e.toString();
    if (isLostSnapshotRace(e)) {
      type = CommitFailedException.class.getSimpleName();
      message = message + " (a concurrent commit to this table won; refresh and retry)";
    } else if (e instanceof JsonProcessingException) {
      type = BadRequestException.class.getSimpleName();
      message = "Malformed request body: " + ((JsonProcessingException) e).getOriginalMessage();
    } else {
      type = e.getClass().getSimpleName();
    }
    return ErrorResponse.builder().responseCode(code).withType(type).withMessage(message).build();
  }

  /** An error the server builds itself (no route, missing credentials), with a chosen type. */
  static ErrorResponse response(int code, String type, String message) {
    return ErrorResponse.builder().responseCode(code).withType(type).withMessage(message).build();
  }

  /**
   * The exception that says what went wrong: a parser's exception that Jackson wrapped while
   * reading a body (an unknown update type, a missing field) rather than Jackson's wrapper.
   */
  static Throwable unwrap(Throwable error) {
    Throwable e = error;
    while (e instanceof JsonProcessingException
        && e.getCause() instanceof RuntimeException
        && e.getCause() != e) {
      e = e.getCause();
    }
    return e;
  }

  private static boolean isLostSnapshotRace(Throwable e) {
    return e instanceof ValidationException
        && e.getMessage() != null
        && e.getMessage().startsWith(STALE_SEQUENCE_NUMBER);
  }
}
