"""A dataset class for `data.custom_cls` (docs/data.md): question / answer pairs in files of your own layout,
turned into rft's rows.

The files here are parquet or jsonl rows holding `question` and `answer` as columns, or inside `extra_info` (as
`rft data arithmetic` writes them); the prompt is this class's own wording of the question. rft builds the class as
verl does, `QuestionAnswer(data_files=..., tokenizer=..., processor=..., config=<the data section>)`, and reads
`dataset[i]`: a row before tokenization (rft applies the chat template and the length settings itself).
"""

import json
from pathlib import Path

import pyarrow.parquet as pq
from torch.utils.data import Dataset

INSTRUCTION = "Compute {question} Reply with the number only."


class QuestionAnswer(Dataset):
    def __init__(self, data_files, tokenizer, config, processor=None):
        files = [data_files] if isinstance(data_files, str) else list(data_files)
        self.pairs = []
        for file in files:
            rows = (pq.read_table(file).to_pylist() if Path(file).suffix == ".parquet" else
                    [json.loads(line) for line in Path(file).read_text().splitlines() if line.strip()])
            for row in rows:
                qa = row if "question" in row else row["extra_info"]
                self.pairs.append((qa["question"], str(qa["answer"])))

    def __len__(self):
        return len(self.pairs)

    def __getitem__(self, i):
        question, answer = self.pairs[i]
        return {"prompt": [{"role": "user", "content": INSTRUCTION.format(question=question)}],
                "data_source": "arithmetic", "reward_model": {"ground_truth": answer},
                "extra_info": {"index": i, "question": question}}
