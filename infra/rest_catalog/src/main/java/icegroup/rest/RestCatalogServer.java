package icegroup.rest;

import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpHandler;
import com.sun.net.httpserver.HttpServer;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Paths;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.regex.Pattern;
import org.apache.iceberg.CatalogProperties;
import org.apache.iceberg.exceptions.NotAuthorizedException;
import org.apache.iceberg.jdbc.JdbcCatalog;
import org.apache.iceberg.rest.RESTUtil;
import org.apache.iceberg.rest.responses.ErrorResponse;

/**
 * A local Iceberg REST catalog: Iceberg's reference {@code CatalogHandlers} over a {@code
 * JdbcCatalog}, served by the JDK's own HTTP server.
 *
 * <p>Why it exists: icegroup's fences must hold against a REST catalog, where the server, not the
 * client, checks a commit's requirements against the latest metadata, and with a credential that
 * the server really checks (OAuth2 client credentials or a bearer token), which Iceberg's own REST
 * test fixture does not do. It needs only the Iceberg runtime jar (handlers, serializers,
 * JdbcCatalog), the JDBC drivers (both copied by Maven, infra/rest_catalog/pom.xml) and pyspark's
 * Hadoop client jars, so it runs on a laptop or in CI.
 *
 * <p>Usage: {@code java -Dsun.net.httpserver.nodelay=true -cp ... icegroup.rest.RestCatalogServer
 * --jdbc-url URL --warehouse PATH_OR_URI [--host 127.0.0.1] [--port 8181] [--catalog-name lake]
 * [--jdbc-user USER] [--jdbc-property KEY=VALUE]... [--token-ttl-s 3600] [--threads 8]}. Secrets
 * come from the environment only: {@code ICEGROUP_REST_CLIENT_ID}, {@code
 * ICEGROUP_REST_CLIENT_SECRET}, {@code ICEGROUP_REST_TOKEN} and {@code ICEGROUP_REST_JDBC_PASSWORD}.
 * {@code infra/rest_catalog.py} builds this command line and starts it.
 *
 * <p>Choices that matter: TCP_NODELAY is on (without it the JDK server's small responses wait on
 * delayed ACKs, about 60 ms per request instead of 6); a SQLite catalog gets one pooled connection,
 * so concurrent commits queue instead of failing with SQLITE_BUSY, which clients would read as
 * "commit state unknown"; the catalog is closed on SIGTERM. One log line per request (method, path,
 * status, milliseconds) goes to stdout; no credential is ever logged.
 */
public final class RestCatalogServer {
  static final String JDBC_PASSWORD_ENV = "ICEGROUP_REST_JDBC_PASSWORD";

  private RestCatalogServer() {}

  /** The command-line settings (no secrets: those come from the environment). */
  static final class Options {
    String host = "127.0.0.1";
    int port = 8181;
    String jdbcUrl;
    String jdbcUser;
    String warehouse;
    String catalogName = "lake";
    long tokenTtlSeconds = 3600;
    int threads = 8;
    final Map<String, String> jdbcProperties = new LinkedHashMap<>();

    static Options parse(String[] args) {
      Options options = new Options();
      for (int i = 0; i < args.length; i++) {
        String flag = args[i];
        if ("--help".equals(flag) || "-h".equals(flag)) {
          throw new IllegalArgumentException("usage");
        }
        if (i + 1 >= args.length) {
          throw new IllegalArgumentException("missing value after " + flag);
        }
        String value = args[++i];
        switch (flag) {
          case "--host":
            options.host = value;
            break;
          case "--port":
            options.port = Integer.parseInt(value);
            break;
          case "--jdbc-url":
            options.jdbcUrl = value;
            break;
          case "--jdbc-user":
            options.jdbcUser = value;
            break;
          case "--jdbc-property":
            {
              int eq = value.indexOf('=');
              if (eq <= 0) {
                throw new IllegalArgumentException("--jdbc-property takes KEY=VALUE, got " + value);
              }
              options.jdbcProperties.put(value.substring(0, eq), value.substring(eq + 1));
              break;
            }
          case "--warehouse":
            options.warehouse = value;
            break;
          case "--catalog-name":
            options.catalogName = value;
            break;
          case "--token-ttl-s":
            options.tokenTtlSeconds = Long.parseLong(value);
            break;
          case "--threads":
            options.threads = Integer.parseInt(value);
            break;
          default:
            throw new IllegalArgumentException("unknown option " + flag);
        }
      }
      if (options.jdbcUrl == null || options.warehouse == null) {
        throw new IllegalArgumentException("--jdbc-url and --warehouse are required");
      }
      return options;
    }

    boolean sqlite() {
      return jdbcUrl.startsWith("jdbc:sqlite:") || jdbcUrl.startsWith("jdbc:icegroup-sqlite:");
    }

    /** The warehouse as a URI: a plain path becomes an absolute file URI. */
    String warehouseUri() {
      if (warehouse.contains(":/")) {
        return warehouse;
      }
      return Paths.get(warehouse).toAbsolutePath().normalize().toUri().toString();
    }
  }

  public static void main(String[] args) throws Exception {
    Options options;
    Auth auth;
    try {
      options = Options.parse(args);
      auth = Auth.fromEnvironment(System.getenv(), options.tokenTtlSeconds);
    } catch (IllegalArgumentException e) {
      if (!"usage".equals(e.getMessage())) {
        System.err.println("icegroup REST catalog: " + e.getMessage());
      }
      System.err.println(
          "usage: RestCatalogServer --jdbc-url URL --warehouse PATH_OR_URI [--host H] [--port P]"
              + " [--catalog-name NAME] [--jdbc-user U] [--jdbc-property K=V]... [--token-ttl-s S]"
              + " [--threads N]; env: "
              + Auth.CLIENT_ID_ENV
              + ", "
              + Auth.CLIENT_SECRET_ENV
              + ", "
              + Auth.TOKEN_ENV
              + ", "
              + JDBC_PASSWORD_ENV);
      System.exit("usage".equals(e.getMessage()) ? 0 : 2);
      return;
    }
    // Read once by the JDK server's configuration: it must be set before the server class loads.
    System.setProperty("sun.net.httpserver.nodelay", "true");

    Warehouses catalogs = new Warehouses(options);
    catalogs.catalog(null);
    ExecutorService pool = Executors.newFixedThreadPool(options.threads);
    HttpServer server = HttpServer.create(new InetSocketAddress(options.host, options.port), 128);
    server.createContext("/", new Handler(new Routes(catalogs), auth));
    server.setExecutor(pool);
    Runtime.getRuntime()
        .addShutdownHook(
            new Thread(
                () -> {
                  server.stop(1);
                  pool.shutdown();
                  try {
                    pool.awaitTermination(5, TimeUnit.SECONDS);
                  } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                  }
                  catalogs.close();
                  System.out.println("icegroup REST catalog stopped");
                  System.out.flush();
                },
                "icegroup-rest-shutdown"));
    server.start();
    InetSocketAddress bound = server.getAddress();
    System.out.printf(
        "catalog %s over %s, warehouse %s; credentials: %s%n",
        options.catalogName, redact(options.jdbcUrl), options.warehouseUri(), auth.describe());
    System.out.printf(
        "icegroup REST catalog listening on http://%s:%d%n", options.host, bound.getPort());
    System.out.flush();
  }

  /**
   * The catalogs behind the handlers, one per warehouse a client names, all in one database: the
   * default one ({@code --catalog-name}, at the warehouse root) and, for each warehouse name W, a
   * catalog named W whose tables live under {@code <root>/W}. JdbcCatalog keeps catalogs apart by
   * name, so they never see each other's tables.
   */
  static final class Warehouses implements Routes.Warehouses {
    private static final Pattern NAME = Pattern.compile("[A-Za-z0-9_-]{1,64}");
    private final Options options;
    private final Map<String, JdbcCatalog> open = new ConcurrentHashMap<>();

    Warehouses(Options options) {
      this.options = options;
    }

    @Override
    public JdbcCatalog catalog(String warehouse) {
      String name = warehouse == null ? options.catalogName : warehouse;
      if (warehouse != null && !NAME.matcher(warehouse).matches()) {
        throw new IllegalArgumentException(
            "Invalid warehouse " + warehouse + ": use 1 to 64 letters, digits, - or _");
      }
      String location =
          warehouse == null ? options.warehouseUri() : options.warehouseUri().replaceAll("/*$", "/") + warehouse;
      return open.computeIfAbsent(name, n -> openCatalog(options, n, location));
    }

    /** Close a warehouse's catalog and forget it, so the next request opens it with new connections. */
    @Override
    public void reopen(String warehouse) {
      JdbcCatalog dropped = open.remove(warehouse == null ? options.catalogName : warehouse);
      if (dropped != null) {
        try {
          dropped.close();
        } catch (RuntimeException e) {
          System.out.println("closing a catalog with dead connections failed: " + e);
        }
      }
    }

    /** Whether a failure is the database's connection lost (SQLSTATE class 08, or 57P: the server shut down). */
    static boolean lostConnection(Throwable failure) {
      for (Throwable cause = failure; cause != null; cause = cause.getCause()) {
        if (cause instanceof java.sql.SQLException) {
          String state = ((java.sql.SQLException) cause).getSQLState();
          if (state != null && (state.startsWith("08") || state.startsWith("57P"))) {
            return true;
          }
        }
        if (cause.getCause() == cause) {
          break;
        }
      }
      return false;
    }

    void close() {
      open.forEach(
          (name, catalog) -> {
            try {
              catalog.close();
            } catch (RuntimeException e) {
              System.out.println("closing catalog " + name + " failed: " + e);
            }
          });
    }
  }

  /** A JdbcCatalog behind the handlers (creates its tables in the database on first use). */
  static JdbcCatalog openCatalog(Options options, String name, String location) {
    Map<String, String> props = new HashMap<>();
    // JdbcCatalog leaves a metadata result open, which pins a SQLite read transaction: with several
    // warehouses' connections on one file, the next write fails with SQLITE_BUSY_SNAPSHOT. icegroup's
    // shim driver (on the classpath) detaches those results.
    props.put(CatalogProperties.URI, options.jdbcUrl.replaceFirst("^jdbc:sqlite:", "jdbc:icegroup-sqlite:"));
    props.put(CatalogProperties.WAREHOUSE_LOCATION, location);
    props.put("jdbc.schema-version", "V1");
    if (options.sqlite()) {
      // One connection per catalog: SQLite allows one writer; a second pooled connection gets
      // SQLITE_BUSY, which reaches clients as a 500, "commit state unknown". Queued, they see 409s at
      // worst. Each warehouse's catalog has its own connection, so WAL lets them read while another
      // writes, and the busy timeout queues their writes.
      props.put(CatalogProperties.CLIENT_POOL_SIZE, "1");
      props.put("jdbc.busy_timeout", "30000");
      props.put("jdbc.journal_mode", "WAL");
    }
    if (options.jdbcUser != null) {
      props.put("jdbc.user", options.jdbcUser);
    }
    String password = System.getenv(JDBC_PASSWORD_ENV);
    if (password != null && !password.isEmpty()) {
      props.put("jdbc.password", password);
    }
    options.jdbcProperties.forEach((key, value) -> props.put("jdbc." + key, value));
    JdbcCatalog catalog = new JdbcCatalog();
    catalog.setConf(new org.apache.hadoop.conf.Configuration());
    catalog.initialize(name, props);
    return catalog;
  }

  /** A JDBC URL fit for a log: no query string (it may carry a password) and no user info. */
  static String redact(String jdbcUrl) {
    String url = jdbcUrl.replaceAll("\\?.*$", "").replaceAll(";.*$", "");
    return url.replaceAll("//[^/@]*@", "//");
  }

  /** Every request: route, credential check, handler call, error mapping, one log line. */
  static final class Handler implements HttpHandler {
    private final Routes routes;
    private final Auth auth;

    Handler(Routes routes, Auth auth) {
      this.routes = routes;
      this.auth = auth;
    }

    @Override
    public void handle(HttpExchange exchange) {
      long start = System.nanoTime();
      String method = exchange.getRequestMethod().toUpperCase(Locale.ROOT);
      String path = exchange.getRequestURI().getRawPath();
      int status = 500;
      try {
        byte[] body;
        try (InputStream in = exchange.getRequestBody()) {
          body = in.readAllBytes();
        }
        status = serve(exchange, method, path, body);
      } catch (Throwable e) {
        // Only a failure to serialize or write the response lands here (the client went away).
        System.out.println("response to " + method + " " + path + " failed: " + e);
      } finally {
        exchange.close();
        System.out.printf(
            "%s %s %d %.1f ms%n", method, path, status, (System.nanoTime() - start) / 1e6);
      }
    }

    private int serve(HttpExchange exchange, String method, String path, byte[] body)
        throws IOException {
      Routes.Match match = Routes.match(method, path);
      if (match == null) {
        boolean otherMethod = Routes.pathExists(path);
        int code = otherMethod ? 405 : 404;
        String type = otherMethod ? "MethodNotAllowedException" : "NoSuchRouteException";
        String message = (otherMethod ? "Method not allowed: " : "No route for ") + method + " " + path;
        return send(exchange, method, code, Errors.response(code, type, message));
      }
      if (match.route == Routes.Route.TOKENS) {
        return token(exchange, method, body);
      }
      Object response;
      try {
        auth.check(exchange.getRequestHeaders().getFirst("Authorization"));
        Map<String, String> query = Routes.query(exchange.getRequestURI().getRawQuery());
        try {
          response = routes.handle(match, query, body);
        } catch (RuntimeException e) {
          if (!Warehouses.lostConnection(e)) {
            throw e;
          }
          // The database restarted under the pool: its connections are dead, and Iceberg's pool
          // does not replace them. Open the catalog again and serve the request once more; a
          // commit re-checks its requirements on what the database holds now.
          System.out.println(method + " " + path + ": the catalog database dropped the connection; reconnecting");
          routes.reopen(match.prefix);
          response = routes.handle(match, query, body);
        }
      } catch (NotAuthorizedException e) {
        exchange.getResponseHeaders().set("WWW-Authenticate", "Bearer");
        return send(exchange, method, 401, Errors.response(e));
      } catch (Exception | LinkageError | AssertionError e) {
        // LinkageError: a class missing from the classpath should be a 500 with its name, not a
        // dropped connection. Other errors (out of memory) are left to the JVM.
        ErrorResponse error = Errors.response(e);
        if (error.code() >= 500) {
          System.out.println(method + " " + path + " failed on the server:");
          e.printStackTrace(System.out);
        }
        return send(exchange, method, error.code(), error);
      }
      return send(exchange, method, response == null ? 204 : 200, response);
    }

    private int token(HttpExchange exchange, String method, byte[] body) throws IOException {
      try {
        Map<String, String> form;
        try {
          form = RESTUtil.decodeFormData(new String(body, StandardCharsets.UTF_8));
        } catch (IllegalArgumentException e) {
          throw new Auth.OAuthError(400, "invalid_request", "the body must be a form of key=value pairs");
        }
        return send(exchange, method, 200, auth.issue(form));
      } catch (Auth.OAuthError e) {
        return send(exchange, method, e.status, e.body());
      }
    }

    private static int send(HttpExchange exchange, String method, int status, Object response)
        throws IOException {
      exchange.getResponseHeaders().set("Cache-Control", "no-store");
      if (response == null || "HEAD".equals(method)) {
        exchange.sendResponseHeaders(status, -1);
        return status;
      }
      byte[] json = Json.MAPPER.writeValueAsBytes(response);
      exchange.getResponseHeaders().set("Content-Type", "application/json");
      exchange.sendResponseHeaders(status, json.length);
      try (OutputStream out = exchange.getResponseBody()) {
        out.write(json);
      }
      return status;
    }
  }
}
