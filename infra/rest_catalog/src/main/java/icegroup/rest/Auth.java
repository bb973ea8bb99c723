package icegroup.rest;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.security.SecureRandom;
import java.util.Arrays;
import java.util.Base64;
import java.util.LinkedHashMap;
import java.util.Map;
import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;
import org.apache.iceberg.exceptions.NotAuthorizedException;
import org.apache.iceberg.rest.responses.OAuthTokenResponse;

/**
 * The server's credentials: the OAuth2 client-credentials flow that issues bearer tokens, and the
 * check of the bearer token on every other request.
 *
 * <p>The server insists on a credential so that clients run their real credential path (pyiceberg's
 * and Java's {@code credential=id:secret} plus {@code oauth2-server-uri}), as they would against a
 * production catalog, instead of an anonymous shortcut that hides mistakes in that configuration.
 *
 * <p>The client id, client secret and an optional static token come from the server's environment
 * ({@code ICEGROUP_REST_CLIENT_ID}, {@code ICEGROUP_REST_CLIENT_SECRET}, {@code ICEGROUP_REST_TOKEN}),
 * never from its command line, where {@code ps} would show them. No secret or token is logged or
 * echoed in an error. Issued tokens are signed, not stored, as a production server's JWTs are: each
 * carries its expiry and a random part, and an HMAC-SHA256 over both with a key derived from the
 * client secret. So a restarted server (same secret) still accepts the tokens it issued before, as
 * clients expect of a catalog that restarts; and a token past its expiry is told apart from an
 * unknown one. A token-exchange request carrying a valid token as its subject gets a fresh token,
 * which is how Java's RESTCatalog refreshes a session before it expires.
 */
final class Auth {
  static final String CLIENT_ID_ENV = "ICEGROUP_REST_CLIENT_ID";
  static final String CLIENT_SECRET_ENV = "ICEGROUP_REST_CLIENT_SECRET";
  static final String TOKEN_ENV = "ICEGROUP_REST_TOKEN";
  static final String ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token";
  private static final String CLIENT_CREDENTIALS = "client_credentials";
  private static final String TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange";
  private static final String TOKENS_PATH = "/v1/oauth/tokens";
  private static final String HMAC = "HmacSHA256";
  // An issued token's bytes: its expiry (epoch ms), a random part, then the HMAC of both.
  private static final int EXPIRY_BYTES = Long.BYTES;
  private static final int RANDOM_BYTES = 16;
  private static final int SIGNED_BYTES = EXPIRY_BYTES + RANDOM_BYTES;
  private static final int MAC_BYTES = 32;

  /** A refused token request, answered with the OAuth2 error body (RFC 6749 section 5.2). */
  static final class OAuthError extends Exception {
    final int status;
    final String error;

    OAuthError(int status, String error, String description) {
      super(description);
      this.status = status;
      this.error = error;
    }

    Map<String, String> body() {
      Map<String, String> body = new LinkedHashMap<>();
      body.put("error", error);
      body.put("error_description", getMessage());
      return body;
    }
  }

  private final byte[] clientId;
  private final byte[] clientSecret;
  private final byte[] staticToken;
  private final long ttlSeconds;
  private final SecureRandom random = new SecureRandom();
  private final SecretKeySpec signingKey;

  private Auth(String clientId, String clientSecret, String staticToken, long ttlSeconds) {
    this.clientId = bytes(clientId);
    this.clientSecret = bytes(clientSecret);
    this.staticToken = bytes(staticToken);
    this.ttlSeconds = ttlSeconds;
    String keySource = clientSecret != null ? clientSecret : staticToken;
    this.signingKey = new SecretKeySpec(sha256("icegroup-rest-token-key:" + keySource), HMAC);
  }

  /**
   * The credentials from the server's environment; at least a client id and secret, or a static
   * token, must be set, because a server that accepts anyone would not exercise a client's
   * credential configuration.
   */
  static Auth fromEnvironment(Map<String, String> env, long ttlSeconds) {
    String id = blankToNull(env.get(CLIENT_ID_ENV));
    String secret = blankToNull(env.get(CLIENT_SECRET_ENV));
    String token = blankToNull(env.get(TOKEN_ENV));
    if ((id == null) != (secret == null)) {
      throw new IllegalArgumentException(
          "set both " + CLIENT_ID_ENV + " and " + CLIENT_SECRET_ENV + ", or neither");
    }
    if (id == null && token == null) {
      throw new IllegalArgumentException(
          "no credential configured: set "
              + CLIENT_ID_ENV
              + " and "
              + CLIENT_SECRET_ENV
              + " (OAuth2 client credentials) and/or "
              + TOKEN_ENV
              + " (a static bearer token) in the server's environment");
    }
    if (ttlSeconds <= 0 || ttlSeconds > Integer.MAX_VALUE) {
      throw new IllegalArgumentException("token TTL must be between 1 and 2^31-1 seconds");
    }
    return new Auth(id, secret, token, ttlSeconds);
  }

  /** What is configured, for the startup log: names only, never a value. */
  String describe() {
    String clients = clientId != null ? "OAuth2 client credentials" : "no client credentials";
    String token = staticToken != null ? " + a static token" : "";
    return clients + token + ", issued tokens live " + ttlSeconds + " s";
  }

  /** Answer {@code POST /v1/oauth/tokens}: a new bearer token, or why not. */
  OAuthTokenResponse issue(Map<String, String> form) throws OAuthError {
    String grant = form.get("grant_type");
    if (CLIENT_CREDENTIALS.equals(grant)) {
      if (clientId == null) {
        throw new OAuthError(400, "unauthorized_client", "this server issues no client-credential tokens");
      }
      String id = form.get("client_id");
      String secret = form.get("client_secret");
      if (id == null || secret == null) {
        throw new OAuthError(401, "invalid_client", "client_id and client_secret are both required");
      }
      // Compare both, always, in constant time: the answer does not say which one was wrong.
      boolean idOk = MessageDigest.isEqual(bytes(id), clientId);
      boolean secretOk = MessageDigest.isEqual(bytes(secret), clientSecret);
      if (!(idOk && secretOk)) {
        throw new OAuthError(401, "invalid_client", "unknown client_id or wrong client_secret");
      }
      return newToken();
    }
    if (TOKEN_EXCHANGE.equals(grant)) {
      String subject = form.get("subject_token");
      if (subject == null) {
        throw new OAuthError(400, "invalid_request", "subject_token is required");
      }
      String problem = problem(subject);
      if (problem != null) {
        throw new OAuthError(401, "invalid_grant", "subject_token " + problem);
      }
      return newToken();
    }
    throw new OAuthError(
        400,
        "unsupported_grant_type",
        "grant_type must be client_credentials or " + TOKEN_EXCHANGE);
  }

  /** Accept the request's {@code Authorization} header, or say what is wrong with it (no token echoed). */
  void check(String authorization) {
    if (authorization == null || authorization.isBlank()) {
      throw new NotAuthorizedException(
          "Missing bearer token: send Authorization: Bearer <token>, from POST %s", TOKENS_PATH);
    }
    String[] parts = authorization.trim().split("\\s+", 2);
    if (parts.length != 2 || !"bearer".equalsIgnoreCase(parts[0])) {
      throw new NotAuthorizedException(
          "Missing bearer token: the Authorization header has no Bearer scheme; get a token from POST %s",
          TOKENS_PATH);
    }
    String problem = problem(parts[1]);
    if (problem != null) {
      throw new NotAuthorizedException("Bearer token %s: get a new one from POST %s", problem, TOKENS_PATH);
    }
  }

  /** Null when the token is valid; else "unknown" or "expired N s ago". */
  private String problem(String token) {
    if (staticToken != null && MessageDigest.isEqual(bytes(token), staticToken)) {
      return null;
    }
    byte[] raw;
    try {
      raw = Base64.getUrlDecoder().decode(token);
    } catch (IllegalArgumentException e) {
      return "unknown";
    }
    if (raw.length != SIGNED_BYTES + MAC_BYTES
        || !MessageDigest.isEqual(
            mac(Arrays.copyOf(raw, SIGNED_BYTES)), Arrays.copyOfRange(raw, SIGNED_BYTES, raw.length))) {
      return "unknown";
    }
    long expiresAt = ByteBuffer.wrap(raw, 0, EXPIRY_BYTES).getLong();
    long now = System.currentTimeMillis();
    if (expiresAt <= now) {
      return "expired " + ((now - expiresAt) / 1000) + " s ago";
    }
    return null;
  }

  private OAuthTokenResponse newToken() {
    ByteBuffer signed = ByteBuffer.allocate(SIGNED_BYTES);
    signed.putLong(System.currentTimeMillis() + ttlSeconds * 1000);
    byte[] nonce = new byte[RANDOM_BYTES];
    random.nextBytes(nonce);
    signed.put(nonce);
    byte[] body = signed.array();
    byte[] raw = Arrays.copyOf(body, SIGNED_BYTES + MAC_BYTES);
    System.arraycopy(mac(body), 0, raw, SIGNED_BYTES, MAC_BYTES);
    String token = Base64.getUrlEncoder().withoutPadding().encodeToString(raw);
    return OAuthTokenResponse.builder()
        .withToken(token)
        .withTokenType("bearer")
        .withIssuedTokenType(ACCESS_TOKEN_TYPE)
        .setExpirationInSeconds((int) ttlSeconds)
        .build();
  }

  private byte[] mac(byte[] body) {
    try {
      Mac mac = Mac.getInstance(HMAC);
      mac.init(signingKey);
      return mac.doFinal(body);
    } catch (GeneralSecurityException e) {
      throw new IllegalStateException(e);
    }
  }

  private static byte[] sha256(String value) {
    try {
      return MessageDigest.getInstance("SHA-256").digest(bytes(value));
    } catch (NoSuchAlgorithmException e) {
      throw new IllegalStateException(e);
    }
  }

  private static byte[] bytes(String value) {
    return value == null ? null : value.getBytes(StandardCharsets.UTF_8);
  }

  private static String blankToNull(String value) {
    return value == null || value.isBlank() ? null : value;
  }
}
