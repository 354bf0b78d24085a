package io.gregor.spark.avro;

import java.io.Serializable;
import java.util.List;
import java.util.Objects;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.codegen.Block;
import org.apache.spark.sql.catalyst.expressions.codegen.CodeBlock;
import org.apache.spark.sql.catalyst.expressions.codegen.CodeGenerator;
import org.apache.spark.sql.catalyst.expressions.codegen.CodegenContext;
import org.apache.spark.sql.catalyst.expressions.codegen.ExprCode;
import org.apache.spark.sql.catalyst.expressions.codegen.JavaCode;
import org.apache.spark.sql.types.DataType;
import scala.collection.immutable.IndexedSeq;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;

/**
 * The expression {@code gregor_from_confluent_avro(value)}: a binary column's framed values
 * decoded by a {@link ConfluentAvroDecoder} into rows. Generated code calls the decoder
 * directly with the value's bytes and takes its {@code InternalRow} as it is; the UDF this
 * replaced returned an external {@code Row} that Spark converted field by field again.
 *
 * <p>It extends {@code Expression} rather than {@code UnaryExpression}, whose final Scala
 * methods a Java class cannot inherit with their generic signatures, and writes the null
 * handling of {@code UnaryExpression.nullSafeCodeGen} itself.
 */
public final class FromConfluentAvro extends Expression implements Serializable {
  private final Expression child;
  private final Seq<Expression> children;
  private final ConfluentAvroDecoder decoder;

  public FromConfluentAvro(Expression child, ConfluentAvroDecoder decoder) {
    this.child = child;
    this.children = CollectionConverters.asScala(List.of(child)).toList();
    this.decoder = decoder;
  }

  @Override
  public Seq<Expression> children() {
    return children;
  }

  @Override
  public Expression withNewChildrenInternal(IndexedSeq<Expression> children) {
    return new FromConfluentAvro(children.apply(0), decoder);
  }

  @Override
  public DataType dataType() {
    return decoder.rowType();
  }

  @Override
  public boolean nullable() {
    return true;
  }

  @Override
  public String prettyName() {
    return ConfluentAvroColumns.DECODER_NAME;
  }

  @Override
  public Object eval(InternalRow input) {
    Object value = child.eval(input);
    return value == null ? null : decoder.decode((byte[]) value);
  }

  @Override
  public ExprCode doGenCode(CodegenContext ctx, ExprCode ev) {
    ExprCode value = child.genCode(ctx);
    String decode = ctx.addReferenceObj("decoder", decoder, ConfluentAvroDecoder.class.getName())
        + ".decode(";
    // boolean isNull = value's isNull; InternalRow row = null;
    // if (!isNull) { row = decoder.decode(value); isNull = row == null; }
    Block code = new CodeBlock(
        strings("\nboolean ", " = ", ";\n" + CodeGenerator.javaType(dataType()) + " ",
            " = null;\nif (!", ") {\n  ", " = " + decode, ");\n  ", " = ", " == null;\n}\n"),
        codes(ev.isNull(), value.isNull(), ev.value(), ev.isNull(), ev.value(), value.value(),
            ev.isNull(), ev.value()));
    return ev.copy(Block.blocksToBlock(blocks(value.code(), code)), ev.isNull(), ev.value());
  }

  private static Seq<String> strings(String... parts) {
    return CollectionConverters.asScala(List.of(parts)).toList();
  }

  private static Seq<JavaCode> codes(JavaCode... parts) {
    return CollectionConverters.asScala(List.of(parts)).toList();
  }

  private static Seq<Block> blocks(Block... parts) {
    return CollectionConverters.asScala(List.of(parts)).toList();
  }

  @Override
  public int productArity() {
    return 1;
  }

  @Override
  public Object productElement(int n) {
    if (n != 0) {
      throw new IndexOutOfBoundsException(n);
    }
    return child;
  }

  @Override
  public boolean canEqual(Object other) {
    return other instanceof FromConfluentAvro;
  }

  @Override
  public boolean equals(Object other) {
    return other instanceof FromConfluentAvro expression && child.equals(expression.child)
        && decoder.equals(expression.decoder);
  }

  @Override
  public int hashCode() {
    return Objects.hash(child, decoder);
  }
}
