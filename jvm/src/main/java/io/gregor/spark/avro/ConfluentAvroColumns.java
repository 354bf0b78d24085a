package io.gregor.spark.avro;

import org.apache.spark.sql.Column;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;

/**
 * {@link ConfluentAvroDecoder} and {@link ConfluentAvroEncoder} as column expressions, for
 * Python's {@code from_confluent_avro} and {@code to_confluent_avro}: the function is in the
 * expression itself rather than in a session's catalog, so a DataFrame of any session uses it,
 * {@code foreachBatch}'s batches included (they belong to the stream's own clone of the session,
 * whose catalog does not see functions registered in the one that started the query).
 *
 * <p>The schema texts, registry URL and header are binary literals: Spark hands a UDF the same
 * array for every row, by which the decoder and encoder find their reading or writing.
 */
public final class ConfluentAvroColumns {
  /** The names the expressions show in plans. */
  public static final String DECODER_NAME = "gregor_from_confluent_avro";
  public static final String ENCODER_NAME = "gregor_to_confluent_avro";

  private ConfluentAvroColumns() {}

  /** The values of {@code value} decoded into rows of {@code rowType} (see the decoder). */
  public static Column decoded(Column value, byte[] registryUrl, byte[] readerTexts,
      DataType rowType) {
    return functions.udf(new ConfluentAvroDecoder(), rowType).withName(DECODER_NAME)
        .apply(value, functions.lit(registryUrl), functions.lit(readerTexts));
  }

  /** The structs of {@code row} encoded in Confluent's framing (see the encoder). */
  public static Column encoded(Column row, byte[] writerTexts, byte[] header) {
    return functions.udf(new ConfluentAvroEncoder(), DataTypes.BinaryType).withName(ENCODER_NAME)
        .apply(row, functions.lit(writerTexts), functions.lit(header));
  }
}
