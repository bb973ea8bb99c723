package icegroup.rest;

import java.io.IOException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.iceberg.catalog.Namespace;
import org.apache.iceberg.catalog.SupportsNamespaces;
import org.apache.iceberg.catalog.TableIdentifier;
import org.apache.iceberg.jdbc.JdbcCatalog;
import org.apache.iceberg.rest.CatalogHandlers;
import org.apache.iceberg.rest.Endpoint;
import org.apache.iceberg.rest.RESTMessage;
import org.apache.iceberg.rest.RESTUtil;
import org.apache.iceberg.rest.requests.CreateNamespaceRequest;
import org.apache.iceberg.rest.requests.CreateTableRequest;
import org.apache.iceberg.rest.requests.CreateViewRequest;
import org.apache.iceberg.rest.requests.RenameTableRequest;
import org.apache.iceberg.rest.requests.UpdateNamespacePropertiesRequest;
import org.apache.iceberg.rest.requests.UpdateTableRequest;
import org.apache.iceberg.rest.responses.ConfigResponse;

/**
 * The served routes of the Iceberg REST spec, and the call of Iceberg's reference {@code
 * CatalogHandlers} each one makes.
 *
 * <p>The routes are exactly what {@code GET /v1/config} advertises in {@code endpoints}: Java's
 * RESTCatalog checks that list before it calls an optional route, so advertising one that is not
 * served (above all {@code transactions/commit}, which needs real atomicity across tables) would
 * lead it into a call that cannot work. Tables and views are served (a JdbcCatalog keeps both);
 * metrics reports, table registration and scan planning are not served and not advertised.
 *
 * <p>A path is matched segment by segment against the spec's templates. The spec's optional {@code
 * {prefix}} segment names a warehouse: a client that asks {@code GET /v1/config?warehouse=W} is told
 * to use prefix {@code W} (the way Polaris and Lakekeeper serve several catalogs from one server),
 * and every later path of it carries {@code W}, which selects that warehouse's catalog. A path
 * without a prefix uses the default catalog. Namespaces in paths and in {@code ?parent=} are decoded
 * by {@code RESTUtil.decodeNamespace} (levels joined by %1F), as Iceberg's own adapter does.
 */
final class Routes {
  /** One route: its method and path template, and the spec endpoint it advertises (if any). */
  enum Route {
    CONFIG("GET", "/v1/config", null),
    TOKENS("POST", "/v1/oauth/tokens", null),
    LIST_NAMESPACES(Endpoint.V1_LIST_NAMESPACES),
    CREATE_NAMESPACE(Endpoint.V1_CREATE_NAMESPACE),
    LOAD_NAMESPACE(Endpoint.V1_LOAD_NAMESPACE),
    NAMESPACE_EXISTS(Endpoint.V1_NAMESPACE_EXISTS),
    DROP_NAMESPACE(Endpoint.V1_DELETE_NAMESPACE),
    UPDATE_NAMESPACE(Endpoint.V1_UPDATE_NAMESPACE),
    LIST_TABLES(Endpoint.V1_LIST_TABLES),
    CREATE_TABLE(Endpoint.V1_CREATE_TABLE),
    LOAD_TABLE(Endpoint.V1_LOAD_TABLE),
    TABLE_EXISTS(Endpoint.V1_TABLE_EXISTS),
    DROP_TABLE(Endpoint.V1_DELETE_TABLE),
    UPDATE_TABLE(Endpoint.V1_UPDATE_TABLE),
    RENAME_TABLE(Endpoint.V1_RENAME_TABLE),
    LIST_VIEWS(Endpoint.V1_LIST_VIEWS),
    CREATE_VIEW(Endpoint.V1_CREATE_VIEW),
    LOAD_VIEW(Endpoint.V1_LOAD_VIEW),
    VIEW_EXISTS(Endpoint.V1_VIEW_EXISTS),
    DROP_VIEW(Endpoint.V1_DELETE_VIEW),
    UPDATE_VIEW(Endpoint.V1_UPDATE_VIEW),
    RENAME_VIEW(Endpoint.V1_RENAME_VIEW);

    final String method;
    final Endpoint endpoint;
    private final List<String> segments;

    Route(Endpoint endpoint) {
      this(endpoint.httpMethod(), endpoint.path(), endpoint);
    }

    Route(String method, String template, Endpoint endpoint) {
      this.method = method;
      this.endpoint = endpoint;
      this.segments = split(template.replace("/{prefix}", ""));
    }

    /** The path variables when {@code path} fits this route's template, else null. */
    Map<String, String> match(List<String> path) {
      if (path.size() != segments.size()) {
        return null;
      }
      Map<String, String> vars = new HashMap<>();
      for (int i = 0; i < path.size(); i++) {
        String want = segments.get(i);
        if (want.startsWith("{") && want.endsWith("}")) {
          vars.put(want.substring(1, want.length() - 1), path.get(i));
        } else if (!want.equals(path.get(i))) {
          return null;
        }
      }
      return vars;
    }
  }

  /** A request matched to a route, with its raw (still percent-encoded) path variables and its prefix. */
  static final class Match {
    final Route route;
    final Map<String, String> vars;
    final String prefix;

    Match(Route route, Map<String, String> vars, String prefix) {
      this.route = route;
      this.vars = vars;
      this.prefix = prefix;
    }
  }

  /** The catalog of each warehouse a prefix names (null: the default one); made on first use. */
  interface Warehouses {
    JdbcCatalog catalog(String warehouse);

    void reopen(String warehouse);
  }

  private final Warehouses warehouses;

  Routes(Warehouses warehouses) {
    this.warehouses = warehouses;
  }

  /** Open a warehouse's catalog again (its database connections died). */
  void reopen(String prefix) {
    warehouses.reopen(prefix);
  }

  /** The endpoints {@code /v1/config} advertises: exactly the catalog routes served here. */
  static List<Endpoint> served() {
    List<Endpoint> endpoints = new ArrayList<>();
    for (Route route : Route.values()) {
      if (route.endpoint != null) {
        endpoints.add(route.endpoint);
      }
    }
    return endpoints;
  }

  /**
   * The route for a method and raw path, else null. A path that fits no template as it is is tried
   * once more without its second segment, the spec's optional {@code {prefix}}.
   */
  static Match match(String method, String rawPath) {
    List<String> path = split(rawPath);
    Match found = matchExactly(method, path, null);
    if (found == null && path.size() >= 3 && "v1".equals(path.get(0))) {
      List<String> withoutPrefix = new ArrayList<>(path);
      String prefix = RESTUtil.decodeString(withoutPrefix.remove(1));
      found = matchExactly(method, withoutPrefix, prefix);
    }
    return found;
  }

  /** Whether some route has this path under another method (405 rather than 404). */
  static boolean pathExists(String rawPath) {
    for (String method : Arrays.asList("GET", "POST", "DELETE", "HEAD")) {
      if (match(method, rawPath) != null) {
        return true;
      }
    }
    return false;
  }

  private static Match matchExactly(String method, List<String> path, String prefix) {
    for (Route route : Route.values()) {
      if (route.method.equals(method)) {
        Map<String, String> vars = route.match(path);
        if (vars != null) {
          return new Match(route, vars, prefix);
        }
      }
    }
    return null;
  }

  /**
   * Serve a catalog route (not {@code TOKENS}): the response object to send as JSON with 200, or
   * null for 204 No Content (drops, renames, existence checks).
   */
  Object handle(Match match, Map<String, String> query, byte[] body) throws IOException {
    Map<String, String> vars = match.vars;
    if (match.route == Route.CONFIG) {
      ConfigResponse.Builder config = ConfigResponse.builder().withEndpoints(served());
      String warehouse = decoded(query, "warehouse");
      if (warehouse != null && !warehouse.isEmpty()) {
        warehouses.catalog(warehouse); // a bad name is refused now, not at the first table
        config.withOverride("prefix", warehouse);
      }
      return config.build();
    }
    return serve(match, warehouses.catalog(match.prefix), query, body);
  }

  private static Object serve(Match match, JdbcCatalog catalog, Map<String, String> query, byte[] body)
      throws IOException {
    Map<String, String> vars = match.vars;
    SupportsNamespaces namespaces = catalog;
    switch (match.route) {

      case LIST_NAMESPACES:
        {
          String parent = query.get("parent");
          Namespace ns = parent == null ? Namespace.empty() : RESTUtil.decodeNamespace(parent);
          String pageSize = decoded(query, "pageSize");
          if (pageSize == null) {
            // The 4-argument form throws NumberFormatException on a null page size.
            return CatalogHandlers.listNamespaces(namespaces, ns);
          }
          return CatalogHandlers.listNamespaces(namespaces, ns, pageToken(query), pageSize);
        }

      case CREATE_NAMESPACE:
        return CatalogHandlers.createNamespace(namespaces, read(body, CreateNamespaceRequest.class));

      case LOAD_NAMESPACE:
        return CatalogHandlers.loadNamespace(namespaces, namespace(vars));

      case NAMESPACE_EXISTS:
        CatalogHandlers.namespaceExists(namespaces, namespace(vars));
        return null;

      case DROP_NAMESPACE:
        CatalogHandlers.dropNamespace(namespaces, namespace(vars));
        return null;

      case UPDATE_NAMESPACE:
        return CatalogHandlers.updateNamespaceProperties(
            namespaces, namespace(vars), read(body, UpdateNamespacePropertiesRequest.class));

      case LIST_TABLES:
        {
          String pageSize = decoded(query, "pageSize");
          if (pageSize == null) {
            return CatalogHandlers.listTables(catalog, namespace(vars));
          }
          return CatalogHandlers.listTables(catalog, namespace(vars), pageToken(query), pageSize);
        }

      case CREATE_TABLE:
        {
          CreateTableRequest request = read(body, CreateTableRequest.class);
          if (request.stageCreate()) {
            return CatalogHandlers.stageTableCreate(catalog, namespace(vars), request);
          }
          return CatalogHandlers.createTable(catalog, namespace(vars), request);
        }

      case LOAD_TABLE:
        return CatalogHandlers.loadTable(catalog, table(vars));

      case TABLE_EXISTS:
        CatalogHandlers.tableExists(catalog, table(vars));
        return null;

      case DROP_TABLE:
        if (Boolean.parseBoolean(decoded(query, "purgeRequested"))) {
          CatalogHandlers.purgeTable(catalog, table(vars));
        } else {
          CatalogHandlers.dropTable(catalog, table(vars));
        }
        return null;

      case UPDATE_TABLE:
        return CatalogHandlers.updateTable(
            catalog, table(vars), read(body, UpdateTableRequest.class));

      case RENAME_TABLE:
        CatalogHandlers.renameTable(catalog, read(body, RenameTableRequest.class));
        return null;

      case LIST_VIEWS:
        return CatalogHandlers.listViews(catalog, namespace(vars));

      case CREATE_VIEW:
        return CatalogHandlers.createView(catalog, namespace(vars), read(body, CreateViewRequest.class));

      case LOAD_VIEW:
        return CatalogHandlers.loadView(catalog, view(vars));

      case VIEW_EXISTS:
        CatalogHandlers.viewExists(catalog, view(vars));
        return null;

      case DROP_VIEW:
        CatalogHandlers.dropView(catalog, view(vars));
        return null;

      case UPDATE_VIEW:
        return CatalogHandlers.updateView(catalog, view(vars), read(body, UpdateTableRequest.class));

      case RENAME_VIEW:
        CatalogHandlers.renameView(catalog, read(body, RenameTableRequest.class));
        return null;

      default:
        throw new IllegalStateException("not a catalog route: " + match.route);
    }
  }

  /** The raw query parameters: names decoded, values left encoded (a parent namespace is decoded as such). */
  static Map<String, String> query(String rawQuery) {
    if (rawQuery == null || rawQuery.isEmpty()) {
      return Collections.emptyMap();
    }
    Map<String, String> params = new HashMap<>();
    for (String pair : rawQuery.split("&")) {
      if (pair.isEmpty()) {
        continue;
      }
      int eq = pair.indexOf('=');
      String name = RESTUtil.decodeString(eq < 0 ? pair : pair.substring(0, eq));
      params.put(name, eq < 0 ? "" : pair.substring(eq + 1));
    }
    return params;
  }

  private static <T extends RESTMessage> T read(byte[] body, Class<T> type) throws IOException {
    if (body.length == 0) {
      throw new IllegalArgumentException("Missing request body: expected " + type.getSimpleName());
    }
    T request = Json.MAPPER.readValue(body, type);
    request.validate();
    return request;
  }

  private static String decoded(Map<String, String> query, String name) {
    String raw = query.get(name);
    return raw == null ? null : RESTUtil.decodeString(raw);
  }

  private static String pageToken(Map<String, String> query) {
    String token = decoded(query, "pageToken");
    return token == null ? "" : token;
  }

  private static Namespace namespace(Map<String, String> vars) {
    return RESTUtil.decodeNamespace(vars.get("namespace"));
  }

  private static TableIdentifier view(Map<String, String> vars) {
    return TableIdentifier.of(namespace(vars), RESTUtil.decodeString(vars.get("view")));
  }

  private static TableIdentifier table(Map<String, String> vars) {
    return TableIdentifier.of(namespace(vars), RESTUtil.decodeString(vars.get("table")));
  }

  private static List<String> split(String path) {
    List<String> parts = new ArrayList<>();
    for (String part : path.split("/")) {
      if (!part.isEmpty()) {
        parts.add(part);
      }
    }
    return parts;
  }
}
