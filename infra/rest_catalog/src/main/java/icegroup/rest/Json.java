package icegroup.rest;

import org.apache.iceberg.rest.RESTSerializers;
import org.apache.iceberg.shaded.com.fasterxml.jackson.annotation.JsonAutoDetect;
import org.apache.iceberg.shaded.com.fasterxml.jackson.annotation.PropertyAccessor;
import org.apache.iceberg.shaded.com.fasterxml.jackson.databind.DeserializationFeature;
import org.apache.iceberg.shaded.com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.iceberg.shaded.com.fasterxml.jackson.databind.PropertyNamingStrategies;

/**
 * The one JSON mapper of the server, configured as Iceberg's own REST client configures its mapper.
 *
 * <p>Iceberg's {@code RESTObjectMapper} is package-private, so its settings are copied here: field
 * visibility ANY (the request and response classes have no setters), unknown properties ignored (a
 * newer client may send more), kebab-case names (the spec's {@code stage-create}, {@code
 * snapshot-id}, ...), and {@code RESTSerializers.registerAll} for the classes with hand-written
 * parsers (table metadata, updates, requirements, errors, tokens). It is Iceberg's shaded Jackson,
 * because those serializers are written against it. Both pyiceberg and Java's RESTCatalog read what
 * it writes; one shared instance is thread-safe once configured.
 */
final class Json {
  static final ObjectMapper MAPPER = build();

  private Json() {}

  private static ObjectMapper build() {
    ObjectMapper mapper = new ObjectMapper();
    mapper.setVisibility(PropertyAccessor.FIELD, JsonAutoDetect.Visibility.ANY);
    mapper.configure(DeserializationFeature.FAIL_ON_UNKNOWN_PROPERTIES, false);
    mapper.setPropertyNamingStrategy(new PropertyNamingStrategies.KebabCaseStrategy());
    RESTSerializers.registerAll(mapper);
    return mapper;
  }
}
