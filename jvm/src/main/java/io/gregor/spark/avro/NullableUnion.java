package io.gregor.spark.avro;

import java.util.ArrayList;
import java.util.List;

import org.apache.avro.Schema;

/** The one branch of a union besides null: the only unions a Spark column type can hold. */
final class NullableUnion {
  private NullableUnion() {}

  static Schema valueBranch(Schema union) {
    List<Schema> branches = new ArrayList<>();
    for (Schema branch : union.getTypes()) {
      if (branch.getType() != Schema.Type.NULL) {
        branches.add(branch);
      }
    }
    if (branches.size() != 1) {
      throw new IllegalArgumentException(
          "unions of several types (" + union + ") have no Spark column type");
    }
    return branches.get(0);
  }
}
