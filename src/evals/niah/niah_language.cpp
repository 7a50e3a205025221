// The NIAH template table (niah_language.h). Texts are ours. The nouns follow one concept order across languages
// (apple, river, mountain or hill, bridge, garden, teacher, doctor, horse, tiger, elephant, rabbit, lemon, carrot,
// guitar, violin, hammer, ladder, candle, mirror, blanket, pillow, umbrella, bicycle, train, airplane, island, forest,
// desert, volcano, castle, lantern, kitchen, bottle, basket, pencil, cherry, diamond, rocket, lighthouse, dolphin),
// with a substitute where a word would contain another noun of its language or the "none" word (tests check both).
#include "evals/niah/niah_language.h"

#include <array>

#include "core/error.h"

namespace hlm {
namespace {

constexpr std::array<NiahLanguage, 11> kLanguages{{
    {"eng_Latn", "English", " ",
     "The special magic number for \"{key}\" is: {value}.",
     "Read the text below carefully and remember it; I will ask you a question about it afterwards.\n\n"
     "<text>\n{context}\n</text>\n\n",
     "<Question> Which special magic numbers for \"{key1}\" appear in the text above?",
     "<Question> Which special magic numbers for \"{key1}\" and \"{key2}\" appear in the text above?",
     "List every one of them.",
     "If the text holds no such number, answer \"none\".</Question>\n\n\n",
     "Write your answer in this form:\n<Answer> the numbers </Answer>",
     "none",
     "apple|river|mountain|bridge|garden|teacher|doctor|horse|tiger|elephant|rabbit|lemon|carrot|guitar|violin|"
     "hammer|ladder|candle|mirror|blanket|pillow|umbrella|bicycle|train|airplane|island|forest|desert|volcano|castle|"
     "lantern|kitchen|bottle|basket|pencil|cherry|diamond|rocket|lighthouse|dolphin"},
    {"rus_Cyrl", "Russian", " ",
     "Особое магическое число для \"{key}\": {value}.",
     "Внимательно прочитайте текст ниже и запомните его: потом я задам по нему вопрос.\n\n"
     "<text>\n{context}\n</text>\n\n",
     "<Question> Какие особые магические числа для \"{key1}\" встречаются в этом тексте?",
     "<Question> Какие особые магические числа для \"{key1}\" и \"{key2}\" встречаются в этом тексте?",
     "Перечислите их все.",
     "Если таких чисел в тексте нет, ответьте \"нет\".</Question>\n\n\n",
     "Дайте ответ в таком виде:\n<Answer> числа </Answer>",
     "нет",
     "яблоко|река|гора|мост|сад|учитель|врач|лошадь|тигр|слон|кролик|лимон|морковь|гитара|скрипка|молоток|"
     "стремянка|свеча|зеркало|одеяло|подушка|зонт|велосипед|поезд|самолёт|остров|лес|пустыня|вулкан|замок|фонарь|"
     "кухня|бутылка|корзина|карандаш|вишня|алмаз|ракета|маяк|дельфин"},
    {"cmn_Hani", "Chinese (Mandarin, simplified)", "",
     "\"{key}\"的特殊魔法数字是：{value}。",
     "请仔细阅读并记住下面的文本，之后我会就它提一个问题。\n\n<text>\n{context}\n</text>\n\n",
     "<Question> 上面的文本中出现了哪些与\"{key1}\"对应的特殊魔法数字？",
     "<Question> 上面的文本中出现了哪些与\"{key1}\"和\"{key2}\"对应的特殊魔法数字？",
     "请把它们全部列出。",
     "如果文本中没有这样的数字，请回答\"无\"。</Question>\n\n\n",
     "请按以下格式作答：\n<Answer> 数字 </Answer>",
     "无",
     "苹果|河流|高山|桥梁|花园|老师|医生|骏马|老虎|大象|兔子|柠檬|胡萝卜|吉他|小提琴|锤子|梯子|蜡烛|镜子|毯子|枕头|"
     "雨伞|自行车|火车|飞机|岛屿|森林|沙漠|火山|城堡|灯笼|厨房|瓶子|篮子|铅笔|樱桃|钻石|火箭|灯塔|海豚"},
    {"hin_Deva", "Hindi", " ",
     "\"{key}\" के लिए विशेष जादुई संख्या है: {value}।",
     "नीचे दिया गया पाठ ध्यान से पढ़ें और याद रखें; बाद में मैं इसके बारे में एक प्रश्न पूछूँगा।\n\n"
     "<text>\n{context}\n</text>\n\n",
     "<Question> ऊपर के पाठ में \"{key1}\" के लिए कौन-सी विशेष जादुई संख्याएँ आई हैं?",
     "<Question> ऊपर के पाठ में \"{key1}\" और \"{key2}\" के लिए कौन-सी विशेष जादुई संख्याएँ आई हैं?",
     "उन सभी को लिखें।",
     "अगर ऐसी कोई संख्या नहीं है, तो \"कोई नहीं\" उत्तर दें।</Question>\n\n\n",
     "अपना उत्तर इस रूप में दें:\n<Answer> संख्याएँ </Answer>",
     "कोई नहीं",
     "सेब|नदी|पहाड़|पुल|बगीचा|शिक्षक|डॉक्टर|घोड़ा|बाघ|हाथी|खरगोश|नींबू|गाजर|गिटार|वायलिन|हथौड़ा|सीढ़ी|मोमबत्ती|दर्पण|"
     "कंबल|तकिया|छाता|साइकिल|रेलगाड़ी|हवाई जहाज़|द्वीप|जंगल|रेगिस्तान|ज्वालामुखी|किला|लालटेन|रसोई|बोतल|टोकरी|पेंसिल|"
     "चेरी|हीरा|रॉकेट|प्रकाशस्तंभ|डॉल्फ़िन"},
    {"arb_Arab", "Arabic (Modern Standard)", " ",
     "الرقم السحري الخاص بكلمة \"{key}\" هو: {value}.",
     "اقرأ النص التالي بعناية واحفظه، فسأطرح عليك سؤالًا عنه لاحقًا.\n\n<text>\n{context}\n</text>\n\n",
     "<Question> ما الأرقام السحرية الخاصة بكلمة \"{key1}\" التي وردت في النص أعلاه؟",
     "<Question> ما الأرقام السحرية الخاصة بكلمتي \"{key1}\" و\"{key2}\" التي وردت في النص أعلاه؟",
     "اذكرها جميعًا.",
     "إذا لم يرد في النص أي رقم من هذا النوع، فأجب بعبارة \"لا يوجد\".</Question>\n\n\n",
     "اكتب إجابتك بهذا الشكل:\n<Answer> الأرقام </Answer>",
     "لا يوجد",
     "تفاحة|نهر|جبل|جسر|حديقة|معلم|طبيب|حصان|نمر|فيل|أرنب|ليمون|جزرة|جيتار|كمان|مطرقة|سلم|شمعة|مرآة|بطانية|وسادة|"
     "مظلة|دراجة|قطار|طائرة|جزيرة|غابة|صحراء|بركان|قلعة|فانوس|مطبخ|زجاجة|سلة|قلم رصاص|كرز|ماس|صاروخ|منارة|دلفين"},
    {"ind_Latn", "Indonesian", " ",
     "Angka ajaib khusus untuk \"{key}\" adalah: {value}.",
     "Bacalah teks di bawah ini dengan saksama dan ingatlah isinya; nanti saya akan mengajukan pertanyaan tentangnya.\n\n"
     "<text>\n{context}\n</text>\n\n",
     "<Question> Angka ajaib khusus apa saja untuk \"{key1}\" yang disebutkan dalam teks di atas?",
     "<Question> Angka ajaib khusus apa saja untuk \"{key1}\" dan \"{key2}\" yang disebutkan dalam teks di atas?",
     "Sebutkan semuanya.",
     "Jika tidak ada angka seperti itu, jawablah \"tidak ada\".</Question>\n\n\n",
     "Tuliskan jawaban Anda dalam bentuk berikut:\n<Answer> angka-angkanya </Answer>",
     "tidak ada",
     "apel|sungai|bukit|jembatan|taman|guru|dokter|kuda|harimau|gajah|kelinci|lemon|wortel|gitar|biola|palu|tangga|"
     "lilin|cermin|selimut|bantal|payung|sepeda|kereta|pesawat|pulau|hutan|padang pasir|gunung berapi|benteng|"
     "lentera|dapur|botol|keranjang|pensil|ceri|berlian|roket|mercusuar|lumba-lumba"},
    {"zsm_Latn", "Malay (Standard)", " ",
     "Nombor ajaib khas untuk \"{key}\" ialah: {value}.",
     "Baca teks di bawah dengan teliti dan ingat isinya; saya akan bertanya tentangnya kemudian.\n\n"
     "<text>\n{context}\n</text>\n\n",
     "<Question> Apakah nombor ajaib khas untuk \"{key1}\" yang disebut dalam teks di atas?",
     "<Question> Apakah nombor ajaib khas untuk \"{key1}\" dan \"{key2}\" yang disebut dalam teks di atas?",
     "Senaraikan semuanya.",
     "Jika tiada nombor sedemikian, jawab \"tiada\".</Question>\n\n\n",
     "Berikan jawapan anda dalam bentuk ini:\n<Answer> nombor-nombornya </Answer>",
     "tiada",
     "epal|sungai|bukit|jambatan|taman|guru|doktor|kuda|harimau|gajah|arnab|limau|lobak merah|gitar|biola|tukul|"
     "tangga|lilin|cermin|selimut|bantal|payung|basikal|kereta api|kapal terbang|pulau|hutan|padang pasir|"
     "gunung berapi|istana|tanglung|dapur|botol|bakul|pensel|ceri|berlian|roket|rumah api|ikan lumba-lumba"},
    {"vie_Latn", "Vietnamese", " ",
     "Con số ma thuật đặc biệt của \"{key}\" là: {value}.",
     "Hãy đọc kỹ và ghi nhớ đoạn văn dưới đây; sau đó tôi sẽ hỏi bạn một câu về nó.\n\n"
     "<text>\n{context}\n</text>\n\n",
     "<Question> Đoạn văn trên có nhắc đến những con số ma thuật đặc biệt nào của \"{key1}\"?",
     "<Question> Đoạn văn trên có nhắc đến những con số ma thuật đặc biệt nào của \"{key1}\" và \"{key2}\"?",
     "Hãy liệt kê tất cả.",
     "Nếu không có con số nào như vậy, hãy trả lời \"không có\".</Question>\n\n\n",
     "Hãy trả lời theo dạng sau:\n<Answer> các con số </Answer>",
     "không có",
     "quả táo|dòng sông|ngọn núi|cây cầu|khu vườn|giáo viên|bác sĩ|con ngựa|con hổ|con voi|con thỏ|quả chanh|"
     "củ cà rốt|đàn ghi-ta|đàn vĩ cầm|cái búa|cái thang|cây nến|cái gương|cái chăn|cái gối|cái ô|xe đạp|tàu hỏa|"
     "máy bay|hòn đảo|khu rừng|sa mạc|núi lửa|lâu đài|đèn lồng|nhà bếp|cái chai|cái giỏ|bút chì|quả anh đào|"
     "kim cương|tên lửa|ngọn hải đăng|cá heo"},
    {"tur_Latn", "Turkish", " ",
     "\"{key}\" için özel sihirli sayı: {value}.",
     "Aşağıdaki metni dikkatle okuyun ve aklınızda tutun; daha sonra onunla ilgili bir soru soracağım.\n\n"
     "<text>\n{context}\n</text>\n\n",
     "<Question> Yukarıdaki metinde \"{key1}\" için hangi özel sihirli sayılar geçiyor?",
     "<Question> Yukarıdaki metinde \"{key1}\" ve \"{key2}\" için hangi özel sihirli sayılar geçiyor?",
     "Hepsini sıralayın.",
     "Böyle bir sayı yoksa \"hiçbiri\" diye cevap verin.</Question>\n\n\n",
     "Cevabınızı şu biçimde verin:\n<Answer> sayılar </Answer>",
     "hiçbiri",
     "armut|nehir|tepe|köprü|bahçe|öğretmen|doktor|zürafa|kaplan|fil|tavşan|limon|havuç|gitar|keman|çekiç|merdiven|"
     "mum|ayna|battaniye|yastık|şemsiye|bisiklet|tren|uçak|ada|orman|çöl|yanardağ|şato|fıçı|mutfak|şişe|sepet|"
     "kalem|kiraz|elmas|roket|deniz feneri|yunus"},
    {"ell_Grek", "Greek", " ",
     "Ο ειδικός μαγικός αριθμός για τη λέξη \"{key}\" είναι: {value}.",
     "Διάβασε προσεκτικά το παρακάτω κείμενο και θυμήσου το· αργότερα θα σου κάνω μια ερώτηση γι' αυτό.\n\n"
     "<text>\n{context}\n</text>\n\n",
     "<Question> Ποιοι ειδικοί μαγικοί αριθμοί για τη λέξη \"{key1}\" αναφέρονται στο παραπάνω κείμενο;",
     "<Question> Ποιοι ειδικοί μαγικοί αριθμοί για τις λέξεις \"{key1}\" και \"{key2}\" αναφέρονται στο παραπάνω "
     "κείμενο;",
     "Ανάφερέ τους όλους.",
     "Αν δεν υπάρχει τέτοιος αριθμός, απάντησε \"κανένας\".</Question>\n\n\n",
     "Δώσε την απάντησή σου σε αυτή τη μορφή:\n<Answer> οι αριθμοί </Answer>",
     "κανένας",
     "μήλο|ποτάμι|βουνό|γέφυρα|κήπος|δάσκαλος|γιατρός|άλογο|τίγρη|ελέφαντας|κουνέλι|λεμόνι|καρότο|κιθάρα|βιολί|σφυρί|"
     "σκάλα|κερί|καθρέφτης|κουβέρτα|μαξιλάρι|ομπρέλα|ποδήλατο|τρένο|αεροπλάνο|νησί|δάσος|έρημος|ηφαίστειο|κάστρο|"
     "φανάρι|κουζίνα|μπουκάλι|καλάθι|μολύβι|κεράσι|διαμάντι|πύραυλος|φάρος|δελφίνι"},
    {"heb_Hebr", "Hebrew", " ",
     "המספר הקסום המיוחד עבור \"{key}\" הוא: {value}.",
     "קרא בעיון את הטקסט שלהלן וזכור אותו; בהמשך אשאל אותך שאלה עליו.\n\n<text>\n{context}\n</text>\n\n",
     "<Question> אילו מספרים קסומים מיוחדים עבור \"{key1}\" מופיעים בטקסט שלמעלה?",
     "<Question> אילו מספרים קסומים מיוחדים עבור \"{key1}\" ועבור \"{key2}\" מופיעים בטקסט שלמעלה?",
     "פרט את כולם.",
     "אם אין מספר כזה, ענה \"אין\".</Question>\n\n\n",
     "כתוב את תשובתך בצורה הזאת:\n<Answer> המספרים </Answer>",
     "אין",
     "תפוח|נהר|גבעה|גשר|גינה|מורה|רופא|סוס|נמר|פיל|ארנב|לימון|גזר|גיטרה|כינור|פטיש|סולם|נר|מראה|שמיכה|כרית|מטרייה|"
     "אופניים|רכבת|מטוס|חוף|יער|מדבר|הר געש|טירה|פנס|מטבח|בקבוק|סל|עיפרון|דובדבן|יהלום|טיל|מגדלור|דולפין"},
}};

}  // namespace

std::span<const NiahLanguage> niah_languages() { return kLanguages; }

std::string niah_language_codes() {
  std::string out;
  for (const NiahLanguage& l : kLanguages) out += (out.empty() ? "" : ", ") + std::string(l.code);
  return out;
}

const NiahLanguage& niah_language(std::string_view code) {
  for (const NiahLanguage& l : kLanguages)
    if (l.code == code) return l;
  throw_input_error("no NIAH templates for language '", code, "' (templates exist for: ", niah_language_codes(),
                    "; add a row to src/evals/niah/niah_language.cpp)");
}

std::vector<std::string> niah_nouns(const NiahLanguage& lang) {
  std::vector<std::string> out;
  std::string_view rest = lang.nouns;
  while (!rest.empty()) {
    const size_t bar = rest.find('|');
    out.emplace_back(rest.substr(0, bar));
    rest = bar == std::string_view::npos ? std::string_view{} : rest.substr(bar + 1);
  }
  return out;
}

std::vector<std::string> niah_none_words(const NiahLanguage& lang) { return {std::string(lang.none_word)}; }

std::string niah_fill(std::string_view text, std::string_view name, std::string_view value) {
  const std::string pattern = "{" + std::string(name) + "}";
  std::string out;
  size_t pos = 0;
  for (size_t hit; (hit = text.find(pattern, pos)) != std::string_view::npos; pos = hit + pattern.size()) {
    out += text.substr(pos, hit - pos);
    out += value;
  }
  out += text.substr(pos);
  return out;
}

std::string niah_needle(const NiahLanguage& lang, std::string_view key, std::string_view value) {
  return niah_fill(niah_fill(lang.needle, "key", key), "value", value);
}

std::string niah_prompt(const NiahLanguage& lang, std::string_view context, const std::vector<std::string>& queries) {
  HLM_CHECK(queries.size() == 1 || queries.size() == 2, "NIAH prompt with ", queries.size(), " queries");
  std::string question = queries.size() == 1 ? niah_fill(lang.question_one, "key1", queries[0])
                                             : niah_fill(niah_fill(lang.question_two, "key1", queries[0]), "key2",
                                                         queries[1]);
  // The context is filled last so that braces inside the haystack are never read as placeholders.
  const size_t at = lang.task.find("{context}");
  HLM_CHECK(at != std::string_view::npos, "NIAH task template of ", lang.code, " has no {context}");
  std::string out(lang.task.substr(0, at));
  out += context;
  out += lang.task.substr(at + 9);
  out += question;
  out += lang.joiner;
  out += lang.list_all;
  out += lang.joiner;
  out += lang.if_none;
  out += lang.answer_format;
  return out;
}

}  // namespace hlm
