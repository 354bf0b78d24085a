package io.gregor.spark.avro;

import org.apache.spark.sql.Column;
import org.apache.spark.sql.classic.ExpressionUtils;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;

/**
 * {@link ConfluentAvroDecoder} and {@link ConfluentAvroEncoder} as column expressions, for
 * Python's {@code from_confluent_avro} and {@code to_confluent_avro}: the function is in the
 * expression itself rather than in a session's catalog, so a DataFrame of any session uses it,
 * {@code foreachBatch}'s batches included (they belong to the stream's own clone of the session,
 * whose catalog does not see functions registered in the one that started the query).
 *
 * <p>The decoder is an expression of its own ({@link FromConfluentAvro}) that generated code
 * calls directly. The encoder is still a UDF: its writer schema texts and header are binary
 * literals, since Spark hands a UDF the same array for every row, by which the encoder finds
 * its writing.
 */
public final class ConfluentAvroColumns {
  /** The names the expressions show in plans. */
  public static final String DECODER_NAME = "gregor_from_confluent_avro";
  public static final String ENCODER_NAME = "gregor_to_confluent_avro";

  private ConfluentAvroColumns() {}

  /**
   * The values of {@code value} decoded into rows of {@code rowType}, read as the reader schema
   * {@code readerTexts} (a JSON array of schema texts, see the decoder).
   */
  public static Column decoded(Column value, String registryUrl, String readerTexts,
      StructType rowType) {
    return ExpressionUtils.column(new FromConfluentAvro(ExpressionUtils.expression(value),
        new ConfluentAvroDecoder(registryUrl, readerTexts, rowType)));
  }

  /** The structs of {@code row} encoded in Confluent's framing (see the encoder). */
  public static Column encoded(Column row, byte[] writerTexts, byte[] header) {
    return functions.udf(new ConfluentAvroEncoder(), DataTypes.BinaryType).withName(ENCODER_NAME)
        .apply(row, functions.lit(writerTexts), functions.lit(header));
  }
}
