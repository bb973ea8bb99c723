package icegroup.jdbc;

import java.lang.reflect.InvocationHandler;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Proxy;
import java.sql.Connection;
import java.sql.DatabaseMetaData;
import java.sql.Driver;
import java.sql.DriverManager;
import java.sql.DriverPropertyInfo;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.SQLFeatureNotSupportedException;
import java.util.Properties;
import java.util.logging.Logger;
import javax.sql.rowset.CachedRowSet;
import javax.sql.rowset.RowSetProvider;

/**
 * sqlite-jdbc for {@code jdbc:icegroup-sqlite:<path>} URLs, with DatabaseMetaData results detached.
 *
 * <p>Iceberg's JdbcCatalog reads one row of {@code getColumns()} / {@code getTables()} and never
 * closes the result. On SQLite an unfinished statement keeps a read transaction open for the life of
 * the pooled connection: with the rollback journal every other process' commit fails with "database
 * is locked", and in WAL mode this process keeps reading the catalog as it was when it started. This
 * driver copies every metadata result into memory and closes the original at once.
 */
public final class SqliteDriver implements Driver {
  static final String PREFIX = "jdbc:icegroup-sqlite:";

  static {
    try {
      DriverManager.registerDriver(new SqliteDriver());
    } catch (SQLException e) {
      throw new ExceptionInInitializerError(e);
    }
  }

  @Override
  public Connection connect(String url, Properties info) throws SQLException {
    if (!acceptsURL(url)) {
      return null;
    }
    Connection connection = sqlite().connect("jdbc:sqlite:" + url.substring(PREFIX.length()), info);
    return proxy(Connection.class, (p, method, args) -> {
      Object result = call(connection, method, args);
      if (result instanceof DatabaseMetaData) {
        DatabaseMetaData meta = (DatabaseMetaData) result;
        return proxy(DatabaseMetaData.class, (p2, m2, a2) -> detach(call(meta, m2, a2)));
      }
      return result;
    });
  }

  private static Object detach(Object result) throws SQLException {
    if (!(result instanceof ResultSet)) {
      return result;
    }
    try (ResultSet rows = (ResultSet) result) {
      CachedRowSet copy = RowSetProvider.newFactory().createCachedRowSet();
      copy.populate(rows);
      return copy;
    }
  }

  private static Object call(Object target, Method method, Object[] args) throws Throwable {
    try {
      return method.invoke(target, args);
    } catch (InvocationTargetException e) {
      throw e.getCause();
    }
  }

  @SuppressWarnings("unchecked")
  private static <T> T proxy(Class<T> type, InvocationHandler handler) {
    return (T) Proxy.newProxyInstance(SqliteDriver.class.getClassLoader(), new Class<?>[] {type}, handler);
  }

  private static Driver sqlite() throws SQLException {
    try {
      return (Driver) Class.forName("org.sqlite.JDBC").getDeclaredConstructor().newInstance();
    } catch (ReflectiveOperationException e) {
      throw new SQLException("sqlite-jdbc (org.sqlite.JDBC) is not on the classpath", e);
    }
  }

  @Override
  public boolean acceptsURL(String url) {
    return url != null && url.startsWith(PREFIX);
  }

  @Override
  public DriverPropertyInfo[] getPropertyInfo(String url, Properties info) throws SQLException {
    return sqlite().getPropertyInfo("jdbc:sqlite:" + url.substring(PREFIX.length()), info);
  }

  @Override
  public int getMajorVersion() {
    return 1;
  }

  @Override
  public int getMinorVersion() {
    return 0;
  }

  @Override
  public boolean jdbcCompliant() {
    return false;
  }

  @Override
  public Logger getParentLogger() throws SQLFeatureNotSupportedException {
    throw new SQLFeatureNotSupportedException();
  }
}
