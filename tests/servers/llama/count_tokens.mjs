// Count the tokens of text files with a GGUF model's own tokenizer (vocabulary only, no weights loaded).
//
//   node count_tokens.mjs --model PATH FILE...
//
// Prints `<tokens> <file>` per file. Used to measure plan-runner's prompts (docs/real-model.md).
import fs from "node:fs";
import {getLlama, LlamaLogLevel} from "node-llama-cpp";

const argv = process.argv.slice(2);
const at = argv.indexOf("--model");
if (at < 0 || !argv[at + 1]) throw new Error("--model PATH is required");
const modelPath = argv[at + 1];
const files = argv.filter((_, i) => i !== at && i !== at + 1);
const llama = await getLlama({gpu: false, build: "never", usePrebuiltBinaries: true, skipDownload: true,
    progressLogs: false, logLevel: LlamaLogLevel.error});
const model = await llama.loadModel({modelPath, gpuLayers: 0, vocabOnly: true});
for (const file of files)
    process.stdout.write(`${model.tokenize(fs.readFileSync(file, "utf8")).length} ${file}\n`);
await model.dispose();
await llama.dispose();
