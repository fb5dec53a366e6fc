"""The data tests' TSV files."""


def write_tsv(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        f.write("sentence\tlabel\n")
        for sentence, label in rows:
            f.write(f"{sentence}\t{label}\n")
    return str(path)
